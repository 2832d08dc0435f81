"""Faults a training job meets outside its inputs: a full disk, a SIGTERM, a warning the user must see (a few seconds
each, on test_train's toy data)."""

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import ONE_RUN, one_run_config, run_snakemake, snakemake_command
from embinit.io import FULL_BELOW, DiskFullError, atomic_path, human_size
from embinit.training import checkpoint, loop
from test_train import assert_same_embeddings, job_of, make_spec, metric_values, selected, train_run
from test_train import reference_run, toy  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
RUN = "toy_block/Xavier/seed7/base"


def fake_disk(monkeypatch, free: int) -> dict:
    """shutil.disk_usage reporting `free` bytes free (change holder["free"] to fill the disk)."""
    holder = {"free": free}
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1 << 40, 0, holder["free"]))
    return holder


@pytest.mark.parametrize(
    "error, free",
    [
        (OSError(errno.ENOSPC, "No space left on device"), 5 << 20),  # the errno says it, whatever disk_usage says
        (OSError(errno.EDQUOT, "Disk quota exceeded"), 5 << 20),
        (OSError("671950 requested and 631776 written"), 1000),  # numpy's tofile: no errno, the disk is full
        (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"), 0),  # torch.save
    ],
)
def test_a_write_that_finds_the_disk_full_is_named_as_such(tmp_path, monkeypatch, error, free):
    fake_disk(monkeypatch, free)
    target = tmp_path / "layer.npy"
    with pytest.raises(DiskFullError) as caught:
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half of it")
            raise error
    assert str(caught.value) == (
        f"disk full writing {target}: {human_size(free)} free; free space on that disk, or point results_dir "
        "(data_dir) to a larger one, then run again"
    )
    assert caught.value.__cause__ is error and caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # neither the output nor the partial temporary file


@pytest.mark.parametrize("error", [OSError("671950 requested and 631776 written"), RuntimeError("a bug")])
def test_a_failed_write_with_space_left_keeps_its_own_error(tmp_path, monkeypatch, error):
    fake_disk(monkeypatch, FULL_BELOW)
    with pytest.raises(type(error)) as caught:
        with atomic_path(tmp_path / "x.parquet"):
            raise error
    assert caught.value is error and list(tmp_path.iterdir()) == []


def test_the_checkpoint_estimate_is_a_little_over_the_checkpoint(reference_run, toy):  # noqa: F811
    out, _ = reference_run
    model = loop.prepare(*job_of(make_spec(toy)), torch.device("cpu")).model
    size = (out / "checkpoint.pt").stat().st_size
    assert size <= checkpoint.expected_size(model) <= 1.5 * size


def test_a_run_stops_before_its_first_epoch_without_the_space_it_needs(toy, tmp_path, monkeypatch):  # noqa: F811
    fake_disk(monkeypatch, 100 << 10)  # the toy run needs about 0.6 MiB
    with pytest.raises(DiskFullError) as caught:
        train_run(make_spec(toy), tmp_path)
    run = loop.prepare(*job_of(make_spec(toy)), torch.device("cpu"))
    needs = human_size(loop.disk_needed(run, resuming=False))
    assert str(caught.value) == (
        f"disk full: {tmp_path} has 100.0 KiB free, the run needs about {needs}; stopped before any work: free space "
        "on that disk, or point results_dir (data_dir) to a larger one, then run again"
    )
    assert not (tmp_path / "checkpoint.pt").exists() and " epoch 1: " not in (tmp_path / "train.log").read_text()


def test_a_disk_filled_mid_run_keeps_the_last_checkpoint(reference_run, toy, tmp_path, monkeypatch):  # noqa: F811
    """The disk fills while epoch 2's checkpoint is written (torch.save fails as it does, without an errno): the error
    names the file and the run's need, epoch 1's checkpoint stays verified, and the rerun resumes from it."""
    out, final = reference_run
    disk, save, saves = fake_disk(monkeypatch, 10 << 30), torch.save, []

    def fill_the_disk(obj, f):
        saves.append(f)
        if len(saves) == 2:
            Path(f).write_bytes(b"PK\x03\x04 part of a zip")
            disk["free"] = 0
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        save(obj, f)

    monkeypatch.setattr(torch, "save", fill_the_disk)
    with pytest.raises(DiskFullError, match=re.escape(f"disk full writing {tmp_path / 'checkpoint.pt'}: 0 B free, ")):
        train_run(make_spec(toy), tmp_path)
    assert "the run needs about " in (tmp_path / "train.log").read_text()
    monkeypatch.undo()
    checkpoint.verify_digest(tmp_path / "checkpoint.pt")
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["epoch"] == 1
    assert not list(tmp_path.glob(".tmp.*"))
    again = train_run(make_spec(toy), tmp_path)
    assert f"resuming {RUN} after epoch 1" in (tmp_path / "train.log").read_text()
    pd.testing.assert_frame_equal(metric_values(tmp_path), metric_values(out))
    assert selected(again) == selected(final)


def test_a_discarded_corrupt_checkpoint_is_named_on_the_job_s_stderr(toy, tmp_path, capsys):  # noqa: F811
    """Snakemake shows a job's stderr (a SLURM job's: its log file), so the user sees why the run starts afresh."""
    train_run(make_spec(toy, epochs=1), tmp_path)
    path, garbage = tmp_path / "checkpoint.pt", b"not a checkpoint at all"
    recorded = checkpoint.digest_path(path).read_text().split()[0]
    path.write_bytes(garbage)
    capsys.readouterr()
    train_run(make_spec(toy, epochs=1), tmp_path)
    shown = capsys.readouterr().err.splitlines()
    warning = (
        f"WARNING discarding {path}: it is unreadable (DigestMismatch: its sha256 {hashlib.sha256(garbage).hexdigest()} "
        f"differs from {recorded} in checkpoint.pt.sha256 (corrupt or cut short)); run {RUN} trains from scratch"
    )
    assert [line for line in shown if " WARNING " in line or " INFO " in line] == [shown[0]]  # warnings only
    assert shown[0].endswith(warning) and warning in (tmp_path / "train.log").read_text()


SIGNALLED = """
import json, os, signal, sys
import torch
from embinit.training import Placement, loop
from embinit.training.spec import RunFiles, RunSpec

save = torch.save


def save_then_signal(obj, f):
    os.kill(os.getpid(), signal.SIGTERM)  # a SIGTERM while the first checkpoint is written
    save(obj, f)


torch.save = save_then_signal
spec = json.loads(sys.argv[1])
files = RunFiles(**{k: spec.pop(k) for k in ("data", "embeddings", "detokenizer", "references")})
loop.train_run(RunSpec.of(spec), files, sys.argv[2], Placement(device="cpu"))
"""


def test_sigterm_ends_the_run_saying_so_after_the_save_under_way(reference_run, toy, tmp_path):  # noqa: F811
    out, final = reference_run
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ended = subprocess.run(
        [sys.executable, "-c", SIGNALLED, json.dumps(make_spec(toy)), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert ended.returncode == 128 + 15, ended.stderr
    assert "Traceback" not in ended.stderr
    message = (
        f"ERROR run {RUN} was terminated by signal SIGTERM (a time limit, kill, or the scheduler), not by an error; "
        "nothing more was saved. Running snakemake again (with --rerun-incomplete if it says the outputs are "
        f"incomplete) resumes it from its last checkpoint ({tmp_path / 'checkpoint.pt'})"
    )
    assert message in ended.stderr and message in (tmp_path / "train.log").read_text()
    checkpoint.verify_digest(tmp_path / "checkpoint.pt")  # the save under way was finished, sidecar included
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["epoch"] == 1
    again = train_run(make_spec(toy), tmp_path)
    assert f"resuming {RUN} after epoch 1" in (tmp_path / "train.log").read_text()
    pd.testing.assert_frame_equal(metric_values(tmp_path), metric_values(out))
    assert selected(again) == selected(final)
    assert_same_embeddings(tmp_path, out)


@pytest.mark.slow
def test_a_workflow_ended_by_sigterm_says_why_and_resumes(tmp_path, one_run_grid, shared_mirror):
    """SIGTERM to the whole process group (SLURM at a time limit) once the run's first epoch is saved: Snakemake's
    output carries the job's line saying so, and the next run resumes after that epoch."""
    workdir = shutil.copytree(one_run_grid, tmp_path / "grid")
    block = {"seeds": 1, "epochs": 6, "batch_size": 8, "initializers": ["Pretrained"]}
    cfg = one_run_config(workdir / "c.yaml", shared_mirror, blocks={"sst2_glove6b50d": block})
    sidecar = workdir / ONE_RUN / "checkpoint.pt.sha256"
    for name in ("final.json", "checkpoint.pt", "checkpoint.pt.sha256"):
        (workdir / ONE_RUN / name).unlink()
    cmd = snakemake_command(workdir)
    started = subprocess.Popen(
        [*cmd, f"{ONE_RUN}/final.json", "--cores", "1", "--configfile", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not sidecar.exists():
        if started.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the train job saved no epoch:\n{started.communicate()[0][-4000:]}")
        time.sleep(0.02)
    os.killpg(started.pid, signal.SIGTERM)
    output = started.communicate(timeout=120)[0]
    assert started.returncode != 0
    assert "was terminated by signal SIGTERM (a time limit, kill, or the scheduler), not by an error" in output
    assert "resumes it from its last checkpoint" in output and "Traceback" not in output
    print(output)  # what the user sees (pytest -s)
    run_snakemake([f"{ONE_RUN}/final.json", "--cores", "1", "--rerun-incomplete", "--configfile", str(cfg)], workdir)
    log = (workdir / ONE_RUN / "train.log").read_text()
    assert "resuming sst2_glove6b50d/Pretrained/seed0/base after epoch " in log
    # train.log keeps both attempts (issue 58: Snakemake deleted the cut one's lines); the job's log, this attempt's
    resumed = log.index("resuming sst2_glove6b50d/Pretrained/seed0/base after epoch ")
    assert 0 <= log.index("was terminated by signal SIGTERM") < resumed
    attempt = (workdir / ONE_RUN / "attempt.log").read_text()
    assert "resuming" in attempt and "SIGTERM" not in attempt and " epoch 1: " not in attempt
    assert json.loads((workdir / ONE_RUN / "final.json").read_text())["epochs"] == 6
