"""A cached raw file that changed after its fetch is caught before any job reads it (issue 31, item 2).

The real SST-2 dev.tsv from ../shared/data, whose sha256 config.yaml names, is fetched into a data_dir, then cut
at a line boundary as a partial copy would be.
"""

import os
import shutil
from pathlib import Path

import pytest

from conftest import REPO, fetch, load_default_config, run_snakemake, write_config
from embinit.data.fetch import ChecksumError, FetchError, FetchSettings, check_cached

REL = "glue/SST-2/dev.tsv"
MIRROR = REPO.parent / "shared" / "data"
REMOTE = load_default_config()["remotes"][REL]


@pytest.fixture
def cached(tmp_path) -> Path:
    """dev.tsv fetched from the shared mirror into tmp_path/data/raw, as the fetch rule leaves it."""
    if not (MIRROR / REL).is_file():
        pytest.skip(f"the shared mirror {MIRROR} lacks {REL}")
    out = tmp_path / "data" / "raw" / REL
    fetch(REL, REMOTE, out, FetchSettings(mirror=str(MIRROR)))
    return out


def cut_at_line(path: Path, keep: int) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:keep]))


def test_cut_cached_file_is_refused_naming_it_and_the_fix(cached):
    settings = FetchSettings(mirror=str(MIRROR))
    check_cached(REL, REMOTE, cached, settings)  # as fetched: accepted from its size and mtime alone
    cut_at_line(cached, 400)
    with pytest.raises(FetchError) as err:
        check_cached(REL, REMOTE, cached, settings)
    message = str(err.value)
    assert message.startswith(f"{cached}: this cached copy of {REL} changed after it was fetched")
    assert f"expected {REMOTE['sha256']}" in message and "when fetched" in message
    assert f"rm {cached}" in message and f"from {MIRROR / REL}" in message


def test_a_changed_configured_hash_is_named_as_such(cached):
    """Issue 58: a new sha256 in the config, over a copy unchanged since its fetch, was reported as the copy having
    changed after it was fetched."""
    other = dict(REMOTE, sha256="0" * 64)
    with pytest.raises(FetchError) as err:
        check_cached(REL, other, cached, FetchSettings(mirror=str(MIRROR)))
    message = str(err.value)
    assert message.startswith(f"{cached}: config remotes.{REL}.sha256 now expects sha256 {'0' * 64}, but this copy")
    assert f"unchanged since (sha256 {REMOTE['sha256']})" in message and f"rm {cached}" in message


def test_touched_or_unrecorded_file_is_hashed_once_and_accepted(cached):
    settings = FetchSettings()
    sidecar = cached.with_name(cached.name + ".fetched.json")
    os.utime(cached, ns=(0, 10**18))  # a new mtime, same bytes (a copy, a restore from backup)
    check_cached(REL, REMOTE, cached, settings)
    assert str(10**18) in sidecar.read_text()
    sidecar.unlink()  # fetched before sidecars existed
    check_cached(REL, REMOTE, cached, settings)
    assert sidecar.is_file()


def test_bad_mirror_names_its_fix_and_the_fixed_mirror_serves_again(cached, tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / REL).parent.mkdir(parents=True)
    shutil.copyfile(cached, mirror / REL)
    cut_at_line(mirror / REL, 400)
    cut_at_line(cached, 400)
    settings = FetchSettings(mirror=str(mirror))
    with pytest.raises(FetchError, match=f"rm {cached}"):
        check_cached(REL, REMOTE, cached, settings)
    cached.unlink()  # the advice taken, while the mirror is still bad
    with pytest.raises(ChecksumError, match=f"Replace {mirror / REL} with a good copy, or delete it"):
        fetch(REL, REMOTE, cached, settings)
    shutil.copyfile(MIRROR / REL, mirror / REL)  # the mirror fixed
    fetch(REL, REMOTE, cached, settings)
    check_cached(REL, REMOTE, cached, settings)
    assert len(cached.read_bytes().splitlines()) == 873


@pytest.mark.slow
def test_workflow_stops_before_any_job_on_a_cut_cached_file(cached, tmp_path):
    """Through Snakemake: even a dry run stops naming the file; once it is deleted, the plan fetches it again."""
    cfg = write_config(tmp_path / "c.yaml", {"mirror": str(MIRROR)})
    cut_at_line(cached, 400)
    proc = run_snakemake([f"data/raw/{REL}", "-n", "--configfile", str(cfg)], cwd=tmp_path, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"rm data/raw/{REL}" in output, output[-3000:]
    cached.unlink()
    proc = run_snakemake([f"data/raw/{REL}", "-n", "--configfile", str(cfg)], cwd=tmp_path)
    assert "rule fetch_glue_SST_2:" in proc.stdout  # dev.tsv and train.tsv: one job, one read of SST-2.zip
