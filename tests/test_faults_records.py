"""Nothing stale, nothing silent (issue 31, items 1, 4 and 6): a result is what its config and inputs produce, whatever
the state of `.snakemake/`, or the run stops and says why. docs/reliability.md lists each fault and its message."""

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ONE_RUN, assert_same_outcome, load_default_config, one_run_config, run_snakemake, write_config
from embinit.identity.digests import spec_digest
from embinit.identity.records import ResultsLock, recorded_digest, sidecar_of, stale_reason, write_sidecar

LAYER = "results/sst2_glove6b50d/Pretrained/seed0/embedding_encoder.npy"
BROKEN = """import numpy as np
from embinit.layers.initializers import register


@register("Broken", reads_pretrained=False)
def broken(shape):
    return np.zeros(shape)


@register("Narrow", reads_pretrained=False)
def narrow(pretrained, shape, rng):
    return np.zeros((shape[0], 3), dtype=np.float32)
"""


def _grid(tmp_path, name, mirror, **extra):
    """A working directory holding the one-run grid's config (conftest's SST-2 GloVe run)."""
    workdir = tmp_path / name
    workdir.mkdir()
    return workdir, one_run_config(workdir / "c.yaml", mirror, **extra)


def _fresh_grid(tmp_path, name, one_run_grid, mirror, **extra):
    """A working directory like `_grid`'s holding the one-run grid's data (splits, vocabulary, extracted rows) and
    none of its layers, runs or Snakemake records: a run built there is built fresh, without the data jobs every grid
    repeats (deterministic; test_faults.py rebuilds them)."""
    workdir, cfg = _grid(tmp_path, name, mirror, **extra)
    shutil.copytree(one_run_grid / "data", workdir / "data")  # copy2: the files' times kept, so they are up to date
    block = Path(ONE_RUN).parents[2]  # results/<block>, where its extracted rows are
    (workdir / block).mkdir(parents=True)
    for rows in (one_run_grid / block).glob("pretrained_encoder.*"):
        shutil.copy2(rows, workdir / block)
    return workdir, cfg


def _build(workdir, cfg, *args):
    return run_snakemake([f"{ONE_RUN}/final.json", "--cores", "1", "--configfile", str(cfg), *args], cwd=workdir)


@pytest.mark.slow
def test_a_config_change_reruns_the_run_without_snakemakes_records(tmp_path, shared_mirror, one_run_grid):
    """The results moved to another working directory (no .snakemake/), then `epochs` 1 -> 2: the dry run names
    the stale record, the run retrains, and what it gives equals a fresh 2-epoch run."""
    moved = shutil.copytree(one_run_grid, tmp_path / "moved", ignore=shutil.ignore_patterns(".snakemake"))
    two = {"sst2_glove6b50d": {"seeds": 1, "epochs": 2, "batch_size": 8, "initializers": ["Pretrained"]}}
    cfg2 = one_run_config(moved / "c.yaml", shared_mirror, blocks=two)

    dry = run_snakemake([f"{ONE_RUN}/final.json", "-n", "--configfile", str(cfg2)], cwd=moved)
    assert f"stale output, its job reruns: {ONE_RUN}/final.json was made by spec" in dry.stderr
    assert "rule train:" in dry.stdout and "Nothing to be done" not in dry.stdout + dry.stderr

    _build(moved, cfg2)
    assert json.loads((moved / ONE_RUN / "final.json").read_text())["epochs"] == 2
    fresh, cfg_fresh = _fresh_grid(tmp_path, "fresh", one_run_grid, shared_mirror, blocks=two)
    _build(fresh, cfg_fresh)
    assert_same_outcome(moved, fresh)
    again = _build(moved, cfg2, "-n")
    assert "stale" not in again.stderr and "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_a_layer_change_rebuilds_the_layer_without_snakemakes_records(tmp_path, shared_mirror, one_run_grid):
    """Pretrained_Shuffled's `mode` changed with .snakemake/ deleted: the layer's sidecar says it is stale, so the
    layer and its run are rebuilt, equal to a fresh run with the new mode."""
    shuffled = {"sst2_glove6b50d": {"seeds": 1, "epochs": 1, "batch_size": 8, "initializers": ["Pretrained_Shuffled"]}}
    workdir, cfg = _fresh_grid(tmp_path, "grid", one_run_grid, shared_mirror, blocks=shuffled)
    run = ONE_RUN.replace("Pretrained", "Pretrained_Shuffled")
    build = [f"{run}/final.json", "--cores", "1", "--configfile"]
    run_snakemake([*build, str(cfg)], cwd=workdir)
    sidecar = sidecar_of(workdir / LAYER.replace("Pretrained", "Pretrained_Shuffled"))
    before = recorded_digest(sidecar)
    assert before is not None
    shutil.rmtree(workdir / ".snakemake")
    elements = {"blocks": shuffled, "initializer_params": {"Pretrained_Shuffled": {"mode": "elements"}}}
    cfg = one_run_config(workdir / "c.yaml", shared_mirror, **elements)
    dry = run_snakemake(["-n", *build, str(cfg)], cwd=workdir)
    assert f"stale output, its job reruns: {sidecar.relative_to(workdir)} was made by spec {before}" in dry.stderr
    run_snakemake([*build, str(cfg)], cwd=workdir)
    assert recorded_digest(sidecar) != before
    fresh, cfg_fresh = _fresh_grid(tmp_path, "fresh", one_run_grid, shared_mirror, **elements)
    run_snakemake([*build, str(cfg_fresh)], cwd=fresh)
    assert (
        json.loads((workdir / run / "final.json").read_text())["best_valid_acc"]
        == json.loads((fresh / run / "final.json").read_text())["best_valid_acc"]
    )


@pytest.mark.slow
def test_a_deleted_or_cut_record_is_rebuilt(tmp_path, one_run_grid):
    fresh = one_run_grid
    workdir = shutil.copytree(fresh, tmp_path / "grid")
    cfg = workdir / "c.yaml"
    (workdir / ONE_RUN / "final.json").unlink()
    _build(workdir, cfg)
    assert_same_outcome(workdir, fresh)
    record = workdir / ONE_RUN / "final.json"
    record.write_text(record.read_text()[:40])  # cut mid-file, .snakemake/ gone
    shutil.rmtree(workdir / ".snakemake")
    dry = run_snakemake([f"{ONE_RUN}/final.json", "-n", "--configfile", str(cfg)], cwd=workdir)
    assert "is not a readable JSON record" in dry.stderr
    _build(workdir, cfg)
    assert_same_outcome(workdir, fresh)


@pytest.mark.slow
def test_a_second_run_on_the_same_results_dir_stops_naming_the_lock(tmp_path, tiny_mirror):
    """A run while another holds the results dir (from this working directory or another) stops before any job,
    naming the lock file; the holder is named before the DAG is built, where Snakemake would report the other run's
    unfinished jobs as incomplete files; a dry run still plans."""
    workdir, cfg = _grid(tmp_path, "grid", tiny_mirror)
    lock = ResultsLock(workdir / "results")
    lock.acquire()  # as the first run holds it while its jobs run
    try:
        proc = run_snakemake(
            [f"{ONE_RUN}/final.json", "--cores", "1", "--configfile", str(cfg)], cwd=workdir, check=False
        )
        dry = run_snakemake([f"{ONE_RUN}/final.json", "-n", "--configfile", str(cfg)], cwd=workdir)
    finally:
        lock.release()
    assert proc.returncode != 0
    said = "is in use by snakemake pid"  # before the DAG, then again where the run stops
    assert said in dry.stderr.split("Building DAG")[0] and "rule train:" in dry.stdout
    assert "is in use by snakemake pid" in proc.stdout + proc.stderr
    assert str(workdir / "results" / ResultsLock.NAME) in proc.stdout + proc.stderr
    assert (
        not (workdir / ONE_RUN / "final.json").exists() and not (workdir / "data" / "prepared").exists()
    )  # no job ran
    _build(workdir, cfg)  # released: it runs
    assert (workdir / ONE_RUN / "final.json").exists()


@pytest.mark.slow
def test_a_broken_extension_stops_the_run_before_any_job_naming_its_file_and_function(tmp_path, tiny_mirror):
    """The entries are tried as the run starts (the Snakefile's onstart; a dry run does not try them: that imports
    torch, which parsing does without)."""
    extension = tmp_path / "broken.py"
    extension.write_text(BROKEN)
    for name, what in (("Broken", "broken() takes 1 positional argument but 3 were given"), ("Narrow", "(9, 3)")):
        workdir, cfg = _grid(tmp_path, name, tiny_mirror, extensions=[str(extension)])
        config = {"initializers": [*load_default_config()["initializers"], name]}  # the blocks' names kept
        cfg = write_config(workdir / "c2.yaml", config)
        args = [f"{ONE_RUN}/final.json", "--cores", "1", "--configfile", str(workdir / "c.yaml"), str(cfg)]
        proc = run_snakemake(args, cwd=workdir, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert f"initializer {name!r} ({extension}, line" in out and what in out
        assert not (workdir / "data" / "raw").exists()  # not even the first fetch ran


def test_records_digests_and_sidecars(tmp_path):
    spec = {"b": 1, "a": [1, 2]}
    digest = spec_digest(spec)
    assert digest == spec_digest({"a": [1, 2], "b": 1}) != spec_digest({"a": [1, 2], "b": 2})
    output = tmp_path / "layer.npy"
    assert recorded_digest(sidecar_of(output)) is None and stale_reason(sidecar_of(output), digest) is None
    write_sidecar(output, digest)
    assert stale_reason(sidecar_of(output), digest) is None
    assert "the config now plans" in stale_reason(sidecar_of(output), spec_digest({"b": 2}))
    sidecar_of(output).write_text("{")
    assert "not a readable JSON record" in stale_reason(sidecar_of(output), digest)
    old = tmp_path / "final.json"
    old.write_text(json.dumps({"epochs": 1}))  # a record from before digests: nothing to compare
    assert stale_reason(old, digest) is None


def test_the_results_lock_is_exclusive_and_dropped_with_its_holder(tmp_path):
    assert ResultsLock(tmp_path / "new").holder() is None and not (tmp_path / "new").exists()  # looking writes nothing
    first, second = ResultsLock(tmp_path), ResultsLock(tmp_path)
    first.acquire()
    assert second.holder().startswith(f"snakemake pid {os.getpid()} on ")
    with pytest.raises(RuntimeError, match=r"in use by snakemake pid \d+ on .* \(lock file .*\.embinit\.lock\)"):
        second.acquire()
    first.release()
    second.acquire()
    second.release()
