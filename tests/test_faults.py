"""Faults a user meets, end to end: reruns after a change, forced reruns, files others must read.

Each case compares against what a fresh run in an empty directory gives, or checks the message and what is
left on disk (docs/reliability.md lists them).
"""

import os
import shutil
import stat

import pytest

from conftest import ONE_RUN, assert_same_outcome, one_run_config, run_outcome, run_snakemake
from embinit.io import write_text_atomic


@pytest.mark.slow
def test_rerun_after_a_layer_change_and_a_forced_rerun_equal_fresh_runs(tmp_path, shared_mirror, one_run_grid):
    work, fresh = shutil.copytree(one_run_grid, tmp_path / "work"), tmp_path / "fresh"
    fresh.mkdir()
    first = run_outcome(work)

    # where a run runs is no part of it: another device, thread count or CUDA determinism reruns nothing
    placement = {"device": "cpu", "num_threads": 1, "deterministic": True}
    moved = one_run_config(tmp_path / "moved.yaml", shared_mirror, train=placement)
    plan = run_snakemake([f"{ONE_RUN}/final.json", "-n", "--configfile", str(moved)], cwd=work)
    assert "Nothing to be done" in plan.stdout + plan.stderr

    # another missing-word policy changes the layer the run starts from, not the run's own settings
    after = one_run_config(tmp_path / "after.yaml", shared_mirror, embeddings={"missing": "zeros"})
    run_snakemake([f"{ONE_RUN}/final.json", "--cores", "2", "--configfile", str(after)], cwd=work)
    run_snakemake([f"{ONE_RUN}/final.json", "--cores", "2", "--configfile", str(after)], cwd=fresh)
    assert_same_outcome(work, fresh)
    assert not first[0].equals(run_outcome(work)[0])  # the change mattered
    assert "other input embeddings.encoder" in (work / ONE_RUN / "train.log").read_text()

    run_snakemake(
        [f"{ONE_RUN}/final.json", "--cores", "2", "--forcerun", "train", "--configfile", str(after)], cwd=work
    )
    assert_same_outcome(work, fresh)
    assert "a rerun trains it again" in (work / ONE_RUN / "train.log").read_text()

    for name in ("final.json", "metrics.parquet", "checkpoint.pt", "checkpoint.pt.sha256", "../embedding_encoder.npy"):
        assert _mode(work / ONE_RUN / name) == 0o666 & ~_umask(), name  # not mkstemp's 0600


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_written_files_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        write_text_atomic(tmp_path / "shared.txt", "x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "shared.txt") == 0o666 & ~umask
    assert os.listdir(tmp_path) == ["shared.txt"]
