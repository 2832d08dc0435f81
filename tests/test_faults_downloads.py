"""Download faults a user meets, end to end against a local HTTP server: cut-short bodies, a flaky server, a
wrong URL, no network, a remote that changed since its hash was locked, a corrupt mirror file.

Each case checks the message and what is left on disk (docs/reliability.md lists them).
"""

import io
import json
import socket
import threading
import traceback
import zipfile
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import fetch, run_snakemake, write_config
from embinit.data.fetch import ChecksumError, FetchError, FetchSettings
from embinit.identity.digests import sha256_of

REL = "glue/SST-2/dev.tsv"
FAST = dict(retries=2, backoff=0.01, timeout=5)  # retries without waiting


class _Handler(BaseHTTPRequestHandler):
    """Replies from server.routes: path -> [(status, body, declared Content-Length or None), ...]; each request
    takes the first reply while more than one is left, so [(503, ...), (200, ...)] fails once, then serves."""

    def do_GET(self):
        self.server.hits[self.path] += 1
        replies = self.server.routes[self.path]
        status, body, length = replies.pop(0) if len(replies) > 1 else replies[0]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """A local HTTP server on a free port, shut down after the test."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.routes, httpd.hits = {}, Counter()
    httpd.url = f"http://127.0.0.1:{httpd.server_port}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def _closed_port_url() -> str:
    """A URL on which nothing listens: connecting is refused, as on a machine without network."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/SST-2.zip"


def _zip_of(member: str, text: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr(member, text)
    return buffer.getvalue()


def test_truncated_download_names_url_and_both_sizes_and_writes_nothing(server, tmp_path):
    server.routes["/big.bin"] = [(200, b"x" * 10, 1000)]
    out = tmp_path / "raw" / "big.bin"
    with pytest.raises(FetchError) as err:
        fetch("big.bin", {"url": f"{server.url}/big.bin", "sha256": None}, out, FetchSettings(**FAST))
    message = str(err.value)
    assert f"{server.url}/big.bin" in message
    assert "expected 1000 bytes (Content-Length), received 10 bytes" in message
    assert server.hits["/big.bin"] == 3  # a cut-short body is retried
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_server_error_is_retried_then_the_file_is_served(server, tmp_path, caplog):
    body = b"sentence\tlabel\n"
    server.routes["/f.tsv"] = [(503, b"busy", None), (200, body, None)]
    out = tmp_path / "raw" / "f.tsv"
    fetch("f.tsv", {"url": f"{server.url}/f.tsv", "sha256": None}, out, FetchSettings(**FAST))
    assert out.read_bytes() == body
    assert server.hits["/f.tsv"] == 2
    assert "HTTP 503 Service Unavailable; retry 1 of 2" in caplog.text


def test_not_found_is_not_retried(server, tmp_path):
    server.routes["/gone.tsv"] = [(404, b"no", None)]
    out = tmp_path / "raw" / "gone.tsv"
    with pytest.raises(FetchError, match="HTTP 404 Not Found"):
        fetch("gone.tsv", {"url": f"{server.url}/gone.tsv", "sha256": None}, out, FetchSettings(**FAST))
    assert server.hits["/gone.tsv"] == 1
    assert not out.exists()


@pytest.mark.parametrize("with_mirror", [False, True])
def test_no_network_gives_one_line_naming_the_mirror_path_and_prefetch(tmp_path, with_mirror):
    url = _closed_port_url()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    out = tmp_path / "raw" / REL
    with pytest.raises(FetchError) as err:
        fetch(
            REL,
            {"url": url, "member": "SST-2/dev.tsv", "sha256": None},
            out,
            FetchSettings(mirror=str(mirror) if with_mirror else None, **FAST),
        )
    message = str(err.value)
    assert "\n" not in message and url in message and "Connection refused" in message
    assert (str(mirror / REL) if with_mirror else f"<mirror>/{REL}") in message
    assert "`prefetch`" in message and "`mirror:`" in message
    assert "During handling" not in "".join(traceback.format_exception(err.value))
    assert not out.exists()


def test_locked_hash_catches_a_changed_served_byte(server, tmp_path):
    server.routes["/SST-2.zip"] = [(200, _zip_of("SST-2/dev.tsv", "sentence\tlabel\ngood\t1\n"), None)]
    lock = tmp_path / "remotes.lock"
    remote = {"url": f"{server.url}/SST-2.zip", "member": "SST-2/dev.tsv", "sha256": None}
    settings = FetchSettings(lock=str(lock), **FAST)
    first = tmp_path / "first" / REL
    fetch(REL, remote, first, settings)
    recorded = sha256_of(first)
    assert json.loads(lock.read_text()) == {REL: recorded}

    server.routes["/SST-2.zip"] = [(200, _zip_of("SST-2/dev.tsv", "sentence\tlabel\ngood\t0\n"), None)]
    second = tmp_path / "second" / REL
    with pytest.raises(ChecksumError) as err:
        fetch(REL, remote, second, settings)
    message = str(err.value)
    assert f"the lock file {lock} records {recorded}" in message and REL in message
    assert server.hits["/SST-2.zip"] == 2  # verified once, never retried
    assert not second.exists()
    assert json.loads(lock.read_text()) == {REL: recorded}


def test_strict_hashes_refuse_an_unlocked_remote_without_downloading(server, tmp_path):
    server.routes["/f.tsv"] = [(200, b"x", None)]
    out = tmp_path / "raw" / "f.tsv"
    with pytest.raises(FetchError) as err:
        fetch(
            "f.tsv",
            {"url": f"{server.url}/f.tsv", "sha256": None},
            out,
            FetchSettings(lock=str(tmp_path / "remotes.lock"), strict=True, **FAST),
        )
    assert "strict_hashes: f.tsv has no sha256" in str(err.value)
    assert server.hits["/f.tsv"] == 0 and not out.exists()


def _corrupt_mirror(tiny_mirror):
    """Flip one byte of the mirror's dev.tsv; return its hash before and after."""
    mirrored = tiny_mirror / REL
    good = sha256_of(mirrored)
    data = bytearray(mirrored.read_bytes())
    data[0] ^= 1
    mirrored.write_bytes(bytes(data))
    return good, sha256_of(mirrored)


def test_changed_mirror_byte_names_the_mirror_file_and_both_hashes(tiny_mirror, tmp_path):
    good, bad = _corrupt_mirror(tiny_mirror)
    out = tmp_path / "raw" / REL
    with pytest.raises(ChecksumError) as err:
        fetch(
            REL,
            {"url": _closed_port_url(), "member": "SST-2/dev.tsv", "sha256": good},
            out,
            FetchSettings(mirror=str(tiny_mirror)),
        )
    message = str(err.value)
    assert f"from mirror {tiny_mirror / REL}" in message and good in message and bad in message
    assert not out.exists() and list(out.parent.iterdir()) == []


@pytest.mark.slow
def test_failed_fetches_fail_once_and_their_logs_say_why(tiny_mirror, tmp_path):
    """Through Snakemake: a corrupt mirror file and an unreachable remote each fail one job, once."""
    good, bad = _corrupt_mirror(tiny_mirror)
    (tiny_mirror / "glue/SST-2/train.tsv").unlink()
    cfg = write_config(
        tmp_path / "c.yaml",
        {
            "mirror": str(tiny_mirror),
            "fetch": {"timeout": 5, "deadline": 60, "retries": 1, "backoff": 0.01},
            "remotes": {REL: {"sha256": good}, "glue/SST-2/train.tsv": {"url": _closed_port_url(), "sha256": None}},
        },
    )
    proc = run_snakemake(
        [f"data/raw/{REL}", "data/raw/glue/SST-2/train.tsv", "--cores", "1", "--keep-going", "--configfile", str(cfg)],
        cwd=tmp_path,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert output.count("Error in rule fetch") == 2, output[-3000:]  # one per file: Snakemake retries nothing

    corrupt_log = (tmp_path / f"data/logs/fetch/{REL}.log").read_text()
    mismatch = f"sha256 mismatch for {REL} (from mirror {tiny_mirror / REL}): expected {good}, got {bad}"
    assert corrupt_log.count(mismatch) == 1
    offline_log = (tmp_path / "data/logs/fetch/glue/SST-2/train.tsv.log").read_text()
    errors = [line for line in offline_log.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "Connection refused" in errors[0] and "`prefetch`" in errors[0]
    assert str(tiny_mirror / "glue/SST-2/train.tsv") in errors[0]
    assert [p for p in (tmp_path / "data").rglob("*") if p.is_file() and "logs" not in p.parts] == []


@pytest.mark.slow
def test_workflow_locks_a_new_hash_and_fetch_settings_refetch_nothing(server, tmp_path, tiny_mirror):
    """Through Snakemake: the lock file lands in the working directory; changing the mirror, strictness or
    timeouts afterwards (none of which changes a file's bytes) leaves the fetched file up to date."""
    text = "sentence\tlabel\ngood\t1\n"
    server.routes["/SST-2.zip"] = [(200, _zip_of("SST-2/dev.tsv", text), None)]
    first = write_config(
        tmp_path / "first.yaml", {"remotes": {REL: {"url": f"{server.url}/SST-2.zip", "sha256": None}}}
    )
    run_snakemake([f"data/raw/{REL}", "--cores", "1", "--configfile", str(first)], cwd=tmp_path)
    assert (tmp_path / "data/raw" / REL).read_text() == text
    assert json.loads((tmp_path / "remotes.lock").read_text()) == {REL: sha256_of(tmp_path / "data/raw" / REL)}

    second = write_config(
        tmp_path / "second.yaml",
        {
            "mirror": str(tiny_mirror),
            "strict_hashes": True,
            "fetch": {"timeout": 1, "deadline": 2, "retries": 0, "backoff": 0},
            "remotes": {REL: {"url": f"{server.url}/SST-2.zip", "sha256": None}},
        },
    )
    proc = run_snakemake([f"data/raw/{REL}", "-n", "--configfile", str(second)], cwd=tmp_path)
    assert "Nothing to be done" in proc.stdout + proc.stderr
    assert server.hits["/SST-2.zip"] == 1
