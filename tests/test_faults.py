"""Faults a user meets, end to end: reruns after a change, forced reruns, files others must read.

Each case compares against what a fresh run in an empty directory gives, or checks the message and what is
left on disk (docs/reliability.md lists them).
"""

import json
import os
import stat

import pandas as pd
import pytest

from conftest import TIMING, run_snakemake, write_config
from embinit.io import write_text_atomic

pytestmark = pytest.mark.slow

RUN = "results/sst2_glove6b50d/Pretrained/seed0/base"


def _run_config(path, mirror, **extra):
    """One SST-2 run on the tiny mirror, started from GloVe 6B 50d (the PyPI stand-in)."""
    return write_config(
        path,
        {
            "mirror": str(mirror),
            "run_blocks": ["sst2_glove6b50d"],
            "remotes": {"glue/SST-2/train.tsv": {"sha256": None}, "glue/SST-2/dev.tsv": {"sha256": None}},
            "model": {"max_len": 64},
            "blocks": {"sst2_glove6b50d": {"seeds": 1, "epochs": 1, "batch_size": 8, "initializers": ["Pretrained"]}},
            **extra,
        },
    )


def _outcome(workdir):
    """What a run produced, without its timings: the metric rows and final.json's selected values."""
    metrics = pd.read_parquet(workdir / RUN / "metrics.parquet").drop(columns=TIMING)
    final = json.loads((workdir / RUN / "final.json").read_text())
    return metrics, {
        k: v for k, v in final.items() if k not in ("train_minutes_per_epoch", "valid_minutes_per_epoch", "device")
    }


def _assert_same_outcome(workdir, expected_workdir):
    got, expected = _outcome(workdir), _outcome(expected_workdir)
    pd.testing.assert_frame_equal(got[0], expected[0])
    assert got[1] == expected[1]


def test_rerun_after_a_layer_change_and_a_forced_rerun_equal_fresh_runs(tmp_path, tiny_mirror):
    work, fresh = tmp_path / "work", tmp_path / "fresh"
    work.mkdir(), fresh.mkdir()
    before = _run_config(tmp_path / "before.yaml", tiny_mirror)
    run_snakemake([f"{RUN}/final.json", "--cores", "2", "--configfile", str(before)], cwd=work)
    first = _outcome(work)

    # where a run runs is no part of it: another device, thread count or CUDA determinism reruns nothing
    placement = {"device": "cpu", "num_threads": 1, "deterministic": True}
    moved = _run_config(tmp_path / "moved.yaml", tiny_mirror, train=placement)
    plan = run_snakemake([f"{RUN}/final.json", "-n", "--configfile", str(moved)], cwd=work)
    assert "Nothing to be done" in plan.stdout + plan.stderr

    # another missing-word policy changes the layer the run starts from, not the run's own settings
    after = _run_config(tmp_path / "after.yaml", tiny_mirror, embeddings={"missing": "zeros"})
    run_snakemake([f"{RUN}/final.json", "--cores", "2", "--configfile", str(after)], cwd=work)
    run_snakemake([f"{RUN}/final.json", "--cores", "2", "--configfile", str(after)], cwd=fresh)
    _assert_same_outcome(work, fresh)
    assert not first[0].equals(_outcome(work)[0])  # the change mattered
    assert "other input embeddings.encoder" in (work / RUN / "train.log").read_text()

    run_snakemake([f"{RUN}/final.json", "--cores", "2", "--forcerun", "train", "--configfile", str(after)], cwd=work)
    _assert_same_outcome(work, fresh)
    assert "a rerun trains it again" in (work / RUN / "train.log").read_text()

    for name in ("final.json", "metrics.parquet", "checkpoint.pt", "checkpoint.pt.sha256", "../embedding_encoder.npy"):
        assert _mode(work / RUN / name) == 0o666 & ~_umask(), name  # not mkstemp's 0600


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_written_files_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        write_text_atomic(tmp_path / "shared.txt", "x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "shared.txt") == 0o666 & ~umask
    assert os.listdir(tmp_path) == ["shared.txt"]
