"""No stale aggregate at exit 0 (issue 43, item 5): a table whose runs' records are missing, or changed since it was
built, is rebuilt, and the lost runs rerun. docs/reliability.md lists each case and its message."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import ONE_RUN, REPO, assert_same_outcome, one_run_config, run_snakemake, snakemake_command
from embinit.identity.digests import spec_digest
from embinit.identity.records import (
    aggregate_stale_reason,
    records_digest,
    sidecar_of,
    stale_reason,
    write_aggregate_sidecar,
)
from embinit.identity.report_code import report_code_digest

TABLE = "results/table1.csv"


def _table_grid(tmp_path, one_run_grid, shared_mirror, **extra):
    """A copy of the one-run grid whose outputs are Table 1 alone, built."""
    workdir = shutil.copytree(one_run_grid, tmp_path / "grid")
    cfg = one_run_config(workdir / "c.yaml", shared_mirror, outputs=["table1"], **extra)
    run_snakemake(["--cores", "1", "--configfile", str(cfg)], cwd=workdir)
    return workdir, cfg


@pytest.mark.slow
def test_a_deleted_record_reruns_its_run_and_rebuilds_the_table(tmp_path, one_run_grid, shared_mirror):
    """Issue 43's first repro: a finished run's final.json deleted with table1.csv still there. Snakemake alone
    said "Nothing to be done" and kept the old table."""
    workdir, cfg = _table_grid(tmp_path, one_run_grid, shared_mirror)
    (workdir / ONE_RUN / "final.json").unlink()
    before = _tree(workdir)
    dry = run_snakemake(["-n", "--configfile", str(cfg)], cwd=workdir)
    assert f"stale output, its job reruns: {TABLE} was built from {ONE_RUN}/final.json, now missing" in dry.stderr
    assert _tree(workdir) == before, "the dry run wrote or touched a file"
    assert "rule train:" in dry.stdout and "rule table1:" in dry.stdout
    run_snakemake(["--cores", "1", "--configfile", str(cfg)], cwd=workdir)
    assert_same_outcome(workdir, one_run_grid)
    assert (workdir / TABLE).stat().st_mtime >= (workdir / ONE_RUN / "final.json").stat().st_mtime
    again = run_snakemake(["-n", "--configfile", str(cfg)], cwd=workdir)
    assert "Nothing to be done" in again.stdout + again.stderr and "stale" not in again.stderr


def _tree(root):
    """Every file under `root` with its size, time and content digest, but Snakemake's own (.snakemake/: a dry run
    keeps its file-listing cache there)."""
    return {
        str(path.relative_to(root)): (
            path.stat().st_size,
            path.stat().st_mtime_ns,
            hashlib.sha256(path.read_bytes()).hexdigest(),
        )
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".snakemake" not in path.relative_to(root).parts
    }


@pytest.mark.slow
def test_a_dry_run_of_a_fresh_checkout_writes_nothing(tmp_path):
    """Issue 57: `snakemake -n` on first-run wrote 31 plan files, back-dated so that `find -newer` missed them."""
    shutil.copy(REPO / "config/first-run.yaml", tmp_path / "first-run.yaml")
    before = _tree(tmp_path)
    dry = run_snakemake(["-n", "--configfile", str(tmp_path / "first-run.yaml")], cwd=tmp_path)
    assert "rule train:" in dry.stdout
    assert _tree(tmp_path) == before


@pytest.mark.slow
def test_the_default_target_rebuilds_a_deleted_markdown_table(tmp_path, one_run_grid, shared_mirror):
    """Issue 58: `all` asked for each output's first file alone, so a deleted table1.md stayed deleted at exit 0."""
    workdir, cfg = _table_grid(tmp_path, one_run_grid, shared_mirror)
    markdown = workdir / "results/table1.md"
    text = markdown.read_text()
    markdown.unlink()
    dry = run_snakemake(["-n", "--configfile", str(cfg)], cwd=workdir)
    assert "rule table1:" in dry.stdout and "rule train:" not in dry.stdout
    run_snakemake(["--cores", "1", "--configfile", str(cfg)], cwd=workdir)
    assert markdown.read_text() == text


@pytest.mark.slow
def test_a_rerun_killed_after_a_config_change_rebuilds_its_runs_and_table(tmp_path, one_run_grid, shared_mirror):
    """Issue 43's second repro: the block's lr changed, the run killed (kill -9, the whole process group) once its
    train job started, --unlock, then --rerun-incomplete: the run trains with the new lr and the table is rebuilt
    from it, where Snakemake alone said "Nothing to be done" over the old lr's table."""
    workdir, cfg = _table_grid(tmp_path, one_run_grid, shared_mirror)
    block = {"seeds": 1, "epochs": 1, "batch_size": 8, "initializers": ["Pretrained"], "lr": 3.0e-4}
    cfg = one_run_config(workdir / "c.yaml", shared_mirror, outputs=["table1"], blocks={"sst2_glove6b50d": block})
    cmd = snakemake_command(workdir)
    started = subprocess.Popen(
        [*cmd, "--cores", "1", "--configfile", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while (workdir / ONE_RUN / "final.json").exists():  # Snakemake removes a job's outputs as it starts it
        assert started.poll() is None and time.monotonic() < deadline, "the train job never started"
        time.sleep(0.05)
    os.killpg(started.pid, signal.SIGKILL)
    started.wait()
    run_snakemake(["--unlock", "--configfile", str(cfg)], cwd=workdir)
    run_snakemake(["--cores", "1", "--rerun-incomplete", "--configfile", str(cfg)], cwd=workdir)
    final = workdir / ONE_RUN / "final.json"
    assert json.loads(final.read_text())["lr"] == 3.0e-4
    assert aggregate_stale_reason(workdir / TABLE, [str(final)]) is None
    sidecar = json.loads(sidecar_of(workdir / TABLE).read_text())
    assert sidecar == {"records_digest": records_digest([str(final)]), "report_code": report_code_digest("table1")}
    again = run_snakemake(["-n", "--configfile", str(cfg)], cwd=workdir)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_an_aggregate_is_stale_when_a_record_is_missing_or_changed(tmp_path):
    table = tmp_path / "table1.csv"
    records = [str(tmp_path / f"run{i}/final.json") for i in (0, 1)]
    for record in records:
        os.makedirs(os.path.dirname(record))
        with open(record, "w") as f:
            f.write('{"best_valid_acc": 0.8}')
    assert aggregate_stale_reason(table, records) is None  # not built yet: its job runs anyway
    table.write_text("a,b\n")
    write_aggregate_sidecar(table, records)
    assert aggregate_stale_reason(table, records) is None

    with open(records[1], "w") as f:  # the same size, an edit: by content
        f.write('{"best_valid_acc": 0.9}')
    assert aggregate_stale_reason(table, records) == f"{table}: the records it was built from changed since"

    os.remove(records[0])
    os.remove(records[1])
    reason = f"{table} was built from {records[0]} (and 1 more), now missing"
    assert aggregate_stale_reason(table, records) == reason
    sidecar_of(table).unlink()  # a table from before these records: a missing one is still stale
    assert aggregate_stale_reason(table, records) == reason


def test_an_aggregate_built_by_other_report_code_is_stale_and_one_from_before_code_digests_is_not(tmp_path):
    table, record = tmp_path / "table1.csv", tmp_path / "final.json"
    record.write_text("{}")
    table.write_text("a,b\n")
    write_aggregate_sidecar(table, [str(record)], "aaaa")
    assert aggregate_stale_reason(table, [str(record)], "aaaa") is None
    reason = f"{table}: the code that builds it (embinit/reports) changed since (aaaa -> bbbb)"
    assert aggregate_stale_reason(table, [str(record)], "bbbb") == reason
    write_aggregate_sidecar(table, [str(record)])  # a sidecar written before builders' code was digested
    assert json.loads(sidecar_of(table).read_text()) == {"records_digest": records_digest([str(record)])}
    assert aggregate_stale_reason(table, [str(record)], "bbbb") is None


def test_an_output_without_its_record_is_stale(tmp_path):
    """A layer whose sidecar is gone: nothing says which spec made it, so it is rebuilt."""
    layer = tmp_path / "embedding_encoder.npy"
    assert (
        stale_reason(sidecar_of(layer), spec_digest({"dim": 50}), layer) is None
    )  # neither there: the job runs anyway
    layer.write_bytes(b"x")
    assert (
        stale_reason(sidecar_of(layer), spec_digest({"dim": 50}), layer) == f"{layer} has no record {sidecar_of(layer)}"
    )
