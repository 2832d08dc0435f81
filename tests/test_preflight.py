"""`snakemake preflight` and `prefetch` (issue 34, item 3): every remote asked without downloading, every
failure listed; hub files downloaded by the hub's client. Tested against a local HTTP server standing in for the
remotes and the hub."""

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import TINY_REMOTES, run_snakemake, write_config
from embinit.data.fetch import FetchError, FetchSettings, fetch
from embinit.data.preflight import preflight, prefetch, render

WEIGHTS = b"weights"
HUB_SHA = hashlib.sha256(WEIGHTS).hexdigest()


class _Hub(BaseHTTPRequestHandler):
    """Answers like the hub's: a listed file gives its commit, LFS sha256 and size (HEAD) and its bytes (GET);
    anything else a 404."""

    def do_HEAD(self, body=b""):
        if self.path in ("/file.zip", "/google/mt5-base/resolve/main/pytorch_model.bin"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(WEIGHTS)))
            self.send_header("X-Repo-Commit", "a" * 40)
            self.send_header("ETag", f'"{HUB_SHA}"')
        else:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            body = b""
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.do_HEAD(body=WEIGHTS)

    def log_message(self, *args):
        pass


@pytest.fixture
def remote_server(monkeypatch):
    """The local server, also standing in for huggingface.co (the hub client's URL template points at it)."""
    import huggingface_hub.constants

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    url = f"http://127.0.0.1:{httpd.server_port}"
    monkeypatch.setattr(
        huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield url
    httpd.shutdown()
    httpd.server_close()


def hub(file, revision="main"):
    return {"url": f"https://huggingface.co/google/mt5-base/resolve/{revision}/{file}", "sha256": None}


def test_online_table_asks_each_remote_and_compares_the_hubs_sha256(remote_server, tmp_path):
    remotes = {
        "a/file.zip": {"url": f"{remote_server}/file.zip", "sha256": None},
        "a/gone.zip": {"url": f"{remote_server}/gone.zip", "sha256": None},
        "mt5/pytorch_model.bin": {**hub("pytorch_model.bin"), "sha256": HUB_SHA},
        "mt5/model.safetensors": hub("model.safetensors"),
        "mt5/changed.bin": {**hub("pytorch_model.bin"), "sha256": "0" * 64},
        "mt5/member.txt": {**hub("pytorch_model.bin"), "member": "x.txt", "sha256": "0" * 64},
    }
    rows, offline = preflight(remotes, tmp_path, FetchSettings(timeout=5))
    by = {r.relpath: r for r in rows}
    assert offline is None
    assert (by["a/file.zip"].online.status, by["a/file.zip"].verdict) == ("HTTP 200", "ok")
    assert by["a/gone.zip"].online.status.startswith("HTTP 404") and by["a/gone.zip"].verdict == "MISSING"
    bin_row = by["mt5/pytorch_model.bin"]
    assert (bin_row.verdict, bin_row.online.size, bin_row.online.sha256) == ("ok", len(WEIGHTS), HUB_SHA)
    assert bin_row.online.status == "hub ok @aaaaaaaaaa"
    assert by["mt5/model.safetensors"].verdict == "MISSING" and "404" in by["mt5/model.safetensors"].online.status
    assert by["mt5/changed.bin"].verdict.startswith("CHANGED")
    assert by["mt5/member.txt"].verdict == "ok"  # the hub's hash is the archive's, not the member's
    text = render(rows, offline)
    assert (
        "a/gone.zip: MISSING (HTTP 404" in text
        and "mt5/model.safetensors: MISSING (hub HTTP 404" in text
        and text.endswith("preflight: 3 of 6 files ready")
    )


def test_offline_counts_cached_and_mirrored_copies_and_says_it_did_not_check(tmp_path):
    closed = "http://127.0.0.1:9/x.zip"  # the discard port: nothing listens, the connection is refused
    mirror = tmp_path / "mirror"
    (mirror / "m").mkdir(parents=True)
    (mirror / "m/in_mirror.txt").write_text("x")
    (tmp_path / "raw/c").mkdir(parents=True)
    (tmp_path / "raw/c/cached.txt").write_text("x")
    remotes = {rel: {"url": closed, "sha256": None} for rel in ("m/in_mirror.txt", "c/cached.txt", "n/nowhere.txt")}
    rows, offline = preflight(remotes, tmp_path / "raw", FetchSettings(mirror=str(mirror), timeout=5))
    assert offline.startswith("no network (") and "refused" in offline
    assert [(r.relpath, r.online.status, r.verdict) for r in rows] == [
        ("c/cached.txt", "not checked", "ok"),
        ("m/in_mirror.txt", "not checked", "ok"),
        ("n/nowhere.txt", "not checked", "UNCHECKED: not cached, not mirrored"),
    ]
    assert "3 of 3 remotes not checked online: no network" in render(rows, offline)


def test_prefetch_goes_past_failures_and_lists_each(tmp_path, capsys):
    mirror = tmp_path / "mirror"
    (mirror / "ok").mkdir(parents=True)
    (mirror / "ok/a.txt").write_text("a")
    (mirror / "ok/bad.txt").write_text("b")
    remotes = {
        "gone/first.txt": {"url": "http://127.0.0.1:9/first", "sha256": None},
        "ok/a.txt": {"url": "http://127.0.0.1:9/a", "sha256": None},
        "ok/bad.txt": {"url": "http://127.0.0.1:9/b", "sha256": "0" * 64},
    }
    failures = prefetch(remotes, tmp_path / "raw", FetchSettings(mirror=str(mirror), retries=0, timeout=5))
    assert (tmp_path / "raw/ok/a.txt").read_text() == "a"  # fetched after the first failure
    assert [f.split(":")[0] for f in failures] == ["gone/first.txt", "ok/bad.txt"]
    assert "Connection refused" in failures[0] and "sha256 mismatch for ok/bad.txt" in failures[1]


@pytest.mark.slow
def test_preflight_target_plans_and_exits_by_the_table(tiny_mirror, tmp_path):
    """`snakemake -n preflight` plans on the paper's config; offline, a mirrored grid passes and a gap fails."""
    proc = run_snakemake(["-n", "preflight"], cwd=tmp_path)
    assert "preflight" in proc.stdout
    (tiny_mirror / "word2vec").mkdir()
    (tiny_mirror / "word2vec/questions-words.txt").write_text(": capital\nathens greece berlin germany\n")
    remotes = {**TINY_REMOTES, "glue/SST-2/train.tsv": {"url": "http://127.0.0.1:9/train.tsv", "sha256": None}}
    cfg = write_config(
        tmp_path / "c.yaml",
        {"mirror": str(tiny_mirror), "run_blocks": ["sst2_glove6b50d"], "remotes": remotes, "fetch": {"timeout": 5}},
    )
    proc = run_snakemake(["preflight", "--cores", "1", "--configfile", str(cfg)], cwd=tmp_path)
    assert "not checked online: no network" in proc.stdout and "preflight: 5 of 5 files ready" in proc.stdout
    (tiny_mirror / "glue/SST-2/train.tsv").unlink()
    proc = run_snakemake(["preflight", "--cores", "1", "--configfile", str(cfg)], cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "glue/SST-2/train.tsv: UNCHECKED: not cached, not mirrored" in proc.stdout


def test_hub_files_come_through_the_hubs_client_and_are_verified(remote_server, tmp_path):
    out = tmp_path / "raw" / "mt5" / "pytorch_model.bin"
    note = fetch("mt5/pytorch_model.bin", {**hub("pytorch_model.bin"), "sha256": HUB_SHA}, out, FetchSettings())
    assert out.read_bytes() == WEIGHTS and "from https://huggingface.co/google/mt5-base/resolve/main/" in note
    assert sorted(p.name for p in out.parent.iterdir()) == ["pytorch_model.bin", "pytorch_model.bin.fetched.json"]
    with pytest.raises(
        FetchError,
        match=r"resolve/main/model\.safetensors: hub HTTP 404 RemoteEntryNotFoundError \(not retried: .*hub_files",
    ):
        fetch(
            "mt5/model.safetensors", hub("model.safetensors"), tmp_path / "raw/mt5/model.safetensors", FetchSettings()
        )
    with pytest.raises(FetchError, match="sha256 mismatch for mt5/x.bin"):
        fetch("mt5/x.bin", {**hub("pytorch_model.bin"), "sha256": "0" * 64}, tmp_path / "raw/x.bin", FetchSettings())


def test_hub_download_without_network_names_the_mirror_path(monkeypatch, tmp_path):
    import huggingface_hub.constants
    import huggingface_hub.utils._http

    # the client backs off about 20 s before it gives up; this test needs only its last word
    monkeypatch.setattr(huggingface_hub.utils._http.time, "sleep", lambda seconds: None)

    monkeypatch.setattr(
        huggingface_hub.constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}",
    )
    with pytest.raises(FetchError) as err:
        fetch("mt5/pytorch_model.bin", hub("pytorch_model.bin"), tmp_path / "raw/p.bin", FetchSettings(mirror="/m"))
    assert "cannot download https://huggingface.co/google/mt5-base/resolve/main/pytorch_model.bin" in str(err.value)
    assert "/m/mt5/pytorch_model.bin" in str(err.value) and "`prefetch`" in str(err.value)
