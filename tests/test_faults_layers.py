"""Every file a job reads checked against what made it (issue 43, item 6): a layer of another shape or cut, a
tokenized split overwritten, is rebuilt before any job reads it, and the next run has nothing left to do."""

import shutil

import numpy as np
import pandas as pd
import pytest

from conftest import ONE_RUN, assert_same_outcome, run_snakemake
from embinit.io import parquet_problem
from embinit.layers.initializers import layer_problem

LAYER = "results/sst2_glove6b50d/Pretrained/seed0/embedding_encoder.npy"
SPLIT = "data/tokenized/sst2/spacy/train.parquet"


@pytest.mark.slow
def test_a_replaced_layer_and_an_overwritten_split_are_rebuilt(tmp_path, one_run_grid):
    """A valid (V, 64) layer under the D = 50 block (which trained a D = 64 model and reported it), then garbage in
    the tokenized training split (the job failed naming it, and the next run said "Nothing to be done")."""
    workdir = shutil.copytree(one_run_grid, tmp_path / "grid")
    build = [f"{ONE_RUN}/final.json", "--cores", "1", "--configfile", str(workdir / "c.yaml")]
    rows = np.load(workdir / LAYER).shape[0]
    np.save(workdir / LAYER, np.zeros((rows, 64), dtype=np.float32))
    dry = run_snakemake([*build, "-n"], cwd=workdir)
    assert f"{LAYER} has shape ({rows}, 64), its vocabulary data/vocab/sst2/spacy/encoder.parquet" in dry.stderr
    assert "rule initialize_embedding:" in dry.stdout and "rule train:" in dry.stdout
    run_snakemake(build, cwd=workdir)
    assert np.load(workdir / LAYER).shape == (rows, 50)
    assert_same_outcome(workdir, one_run_grid)

    (workdir / SPLIT).write_text("garbage\n")
    dry = run_snakemake([*build, "-n"], cwd=workdir)
    assert f"{SPLIT} is not a readable Parquet file" in dry.stderr and "rule vocab_sst2:" in dry.stdout
    run_snakemake(build, cwd=workdir)
    pd.testing.assert_frame_equal(pd.read_parquet(workdir / SPLIT), pd.read_parquet(one_run_grid / SPLIT))
    assert_same_outcome(workdir, one_run_grid)
    again = run_snakemake([*build, "-n"], cwd=workdir)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_layer_is_checked_against_its_vocabulary_and_d(tmp_path):
    vocab, layer = tmp_path / "encoder.parquet", tmp_path / "layer.npy"
    pd.DataFrame({"token": ["a", "b", "c"]}).to_parquet(vocab)
    assert layer_problem(str(layer), str(vocab), 4) is None  # not built yet
    np.save(layer, np.zeros((3, 4), dtype=np.float32))
    assert layer_problem(str(layer), str(vocab), 4) is None
    assert (
        layer_problem(str(layer), str(vocab), 5)
        == f"{layer} has shape (3, 4), its vocabulary {vocab} and D need (3, 5)"
    )
    np.save(layer, np.zeros((10, 4), dtype=np.float32))
    assert "has shape (10, 4)" in layer_problem(str(layer), str(vocab), 4)
    data = layer.read_bytes()
    for cut in (0, 20, len(data) - 1):
        layer.write_bytes(data[:cut])
        assert layer_problem(str(layer), str(vocab), 4).startswith(f"{layer} is not a readable .npy file or is cut")


def test_an_unreadable_parquet_file_is_named(tmp_path):
    split = tmp_path / "train.parquet"
    assert parquet_problem(split) is None
    pd.DataFrame({"ids": [[1, 2]]}).to_parquet(split)
    assert parquet_problem(split) is None
    data = split.read_bytes()
    split.write_bytes(data[: len(data) // 2])
    assert parquet_problem(split).startswith(f"{split} is not a readable Parquet file (")


@pytest.mark.slow
def test_allowed_rules_are_held_to_where_an_allowed_job_rebuilds_a_runs_input(tmp_path, one_run_grid):
    """A clone without the layers (they are not committed) rebuilding one with `--allowed-rules initialize_embedding`:
    Snakemake plans the run's `train` too, though not allowed, and ran it (deleting the record first); now nothing
    runs and the message says what to do."""
    workdir = shutil.copytree(one_run_grid, tmp_path / "grid")
    (workdir / LAYER).unlink()
    record = (workdir / ONE_RUN / "final.json").read_text()
    build = [LAYER, f"{ONE_RUN}/final.json", "--cores", "1", "--configfile", str(workdir / "c.yaml")]
    proc = run_snakemake([*build, "--allowed-rules", "initialize_embedding"], cwd=workdir, check=False)
    assert proc.returncode != 0
    assert "--allowed-rules initialize_embedding, but Snakemake planned jobs of other rules too: train (1)" in (
        proc.stdout + proc.stderr
    )
    assert not (workdir / LAYER).exists() and (workdir / ONE_RUN / "final.json").read_text() == record
    run_snakemake([LAYER, "--cores", "1", "--configfile", str(workdir / "c.yaml")], cwd=workdir)  # its own target
    assert (workdir / LAYER).exists() and (workdir / ONE_RUN / "final.json").read_text() == record
