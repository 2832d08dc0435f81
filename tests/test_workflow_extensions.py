"""Adding an initializer costs only its own runs: on a finished tiny grid, an extension initializer's jobs are planned
by its code alone (issue "Your own initializer in minutes", item 1)."""

import json

import pandas as pd
import pytest

from conftest import TIMING, TINY_REMOTES, planned_outputs, run_snakemake, write_config

pytestmark = pytest.mark.slow

BLOCK = "sst2_glove6b50d"
BUILT_IN = ["Xavier", "Pretrained", "Xavier_Pretrained"]
EXTENSION = """import numpy as np

from embinit.layers.initializers import register, xavier_bound

SETTINGS = {{"scale": {scale}}}


@register("Xavier_Ext", reads_pretrained=False)
def xavier_ext(pretrained, shape, rng):
    a = SETTINGS["scale"] * xavier_bound(*shape)
    return rng.uniform(-a, a, size=shape).astype(np.float32)


def unrelated():
    return {unrelated}
"""


def _config(path, mirror, extension=None):
    inits = BUILT_IN + (["Xavier_Ext"] if extension else [])
    overrides = {
        "mirror": str(mirror),
        "remotes": TINY_REMOTES,
        "model": {"max_len": 64},
        "run_blocks": [BLOCK],
        "outputs": ["table1", "table7"],
        "blocks": {BLOCK: {"seeds": 1, "epochs": 1, "batch_size": 8, "initializers": inits}},
    }
    if extension:
        overrides |= {"extensions": [str(extension)], "initializers": [*BUILT_IN, "Pretrained_Xavier", "Xavier_Ext"]}
    return write_config(path, overrides)


def _run(name):
    return f"results/{BLOCK}/{name}/seed0"


def _metrics(directory):
    """What the extension's run computed, without the machine-dependent timing columns."""
    frame = pd.read_parquet(directory / _run("Xavier_Ext") / "base/metrics.parquet")
    return frame.drop(columns=[c for c in TIMING if c in frame])


def _fresh(tmp_path, name, mirror, extension):
    """The extension's run from nothing, in a directory of its own, with the config of the moment."""
    fresh = tmp_path / name
    fresh.mkdir()
    cfg = _config(fresh / "c.yaml", mirror, extension)
    run_snakemake([f"{_run('Xavier_Ext')}/base/final.json", "--cores", "1", "--configfile", str(cfg)], cwd=fresh)
    return _metrics(fresh)


def test_an_extension_initializer_reruns_only_its_own_jobs(tmp_path, tiny_mirror):
    grid = tmp_path / "grid"
    grid.mkdir()
    run_snakemake(
        ["--cores", "2", "--set-threads", "train=1", "--configfile", str(_config(grid / "base.yaml", tiny_mirror))],
        cwd=grid,
    )
    built = {init: (grid / _run(init) / "base/final.json").stat().st_mtime_ns for init in BUILT_IN}

    extension = tmp_path / "ext.py"
    cfg = _config(grid / "ext.yaml", tiny_mirror, extension)
    own = {
        f"{_run('Xavier_Ext')}/embedding_encoder.npy",
        *(f"{_run('Xavier_Ext')}/base/{f}" for f in ("final.json", "metrics.parquet", "embeddings.npz")),
        "results/table1.csv",
        "results/table1.md",
    }

    def plan():
        return planned_outputs(run_snakemake(["-n", "--configfile", str(cfg)], cwd=grid))

    def run():
        run_snakemake(["--cores", "2", "--configfile", str(cfg)], cwd=grid)

    # (a) adding it: its layer, its run and Table 1, which shows it; not Table 7, the extraction or other layers
    extension.write_text(EXTENSION.format(scale=2.0, unrelated=1))
    assert plan() == own
    run()
    first = _metrics(grid)
    pd.testing.assert_frame_equal(first, _fresh(tmp_path, "fresh_a", tiny_mirror, extension))  # (d)

    # (b) editing the dict it reads (issue 58: a changed SETTINGS reran nothing): its jobs again, nothing else
    extension.write_text(EXTENSION.format(scale=3.0, unrelated=1))
    assert plan() == own
    run()
    assert not _metrics(grid).equals(first)  # the edit changed its layer, so its run

    # (c) editing another function of the same file: nothing
    extension.write_text(EXTENSION.format(scale=3.0, unrelated=2))
    assert plan() == set()

    # (d) after the edits, the grid's run equals a fresh run of the file as it is now; the built-in runs never reran
    pd.testing.assert_frame_equal(_metrics(grid), _fresh(tmp_path, "fresh_c", tiny_mirror, extension))
    assert {init: (grid / _run(init) / "base/final.json").stat().st_mtime_ns for init in BUILT_IN} == built
    assert "Xavier_Ext" in json.dumps(pd.read_csv(grid / "results/table1.csv")["initializer"].tolist())
