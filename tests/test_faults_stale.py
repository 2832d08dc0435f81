"""No stale aggregate at exit 0 (issue 43, item 5): a table whose runs' records are missing, or changed since it was
built, is rebuilt, and the lost runs rerun. docs/reliability.md lists each case and its message."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ONE_RUN, REPO, assert_same_outcome, one_run_config, run_snakemake
from embinit.records import (
    aggregate_stale_reason,
    plan,
    plan_aggregate,
    records_digest,
    sidecar_of,
    write_aggregate_sidecar,
)

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
    dry = run_snakemake(["-n", "--configfile", str(cfg)], cwd=workdir)
    assert f"stale output, its job reruns: {TABLE} was built from {ONE_RUN}/final.json, now missing" in dry.stderr
    assert "rule train:" in dry.stdout and "rule table1:" in dry.stdout
    run_snakemake(["--cores", "1", "--configfile", str(cfg)], cwd=workdir)
    assert_same_outcome(workdir, one_run_grid)
    assert (workdir / TABLE).stat().st_mtime >= (workdir / ONE_RUN / "final.json").stat().st_mtime
    again = run_snakemake(["-n", "--configfile", str(cfg)], cwd=workdir)
    assert "Nothing to be done" in again.stdout + again.stderr and "stale" not in again.stderr


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
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
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
    assert json.loads(sidecar_of(workdir / TABLE).read_text())["records_digest"] == records_digest([str(final)])
    again = run_snakemake(["-n", "--configfile", str(cfg)], cwd=workdir)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_an_aggregate_is_stale_when_a_record_is_missing_or_changed(tmp_path, capsys):
    table, planned = tmp_path / "table1.csv", tmp_path / "plans/table1/plan.json"
    records = [str(tmp_path / f"run{i}/final.json") for i in (0, 1)]
    for record in records:
        os.makedirs(os.path.dirname(record))
        with open(record, "w") as f:
            f.write('{"best_valid_acc": 0.8}')
    plan_aggregate(planned, table, records)  # not built yet: its job runs anyway
    assert planned.stat().st_mtime == 0 and json.loads(planned.read_text())["records"] == sorted(records)
    table.write_text("a,b\n")
    write_aggregate_sidecar(table, planned)
    plan_aggregate(planned, table, records)
    assert planned.stat().st_mtime == 0 and capsys.readouterr().err == ""

    with open(records[1], "w") as f:  # the same size, an edit: by content
        f.write('{"best_valid_acc": 0.9}')
    assert aggregate_stale_reason(table, records) == f"{table}: the records it was built from changed since"
    plan_aggregate(planned, table, records)
    assert planned.stat().st_mtime > 0 and "stale output, its job reruns" in capsys.readouterr().err

    os.remove(records[0])
    os.remove(records[1])
    reason = f"{table} was built from {records[0]} (and 1 more), now missing"
    assert aggregate_stale_reason(table, records) == reason
    sidecar_of(table).unlink()  # a table from before these records: a missing one is still stale
    assert aggregate_stale_reason(table, records) == reason


def test_an_output_without_its_record_is_stale(tmp_path):
    """A layer whose sidecar is gone: nothing says which spec made it, so it is rebuilt."""
    layer, planned = tmp_path / "embedding_encoder.npy", tmp_path / "plan.json"
    plan(planned, sidecar_of(layer), {"dim": 50}, layer)
    assert planned.stat().st_mtime == 0  # neither there: the job runs anyway
    layer.write_bytes(b"x")
    plan(planned, sidecar_of(layer), {"dim": 50}, layer)
    assert planned.stat().st_mtime > 0
