"""Tables 12 and 13 (beyond the paper) as Snakemake targets, end to end on a tiny SST-2 grid: one config entry per
table defines its sweep, and the block's own runs serve its k = 1 and its own learning rate."""

import json

import pandas as pd
import pytest

from conftest import TINY_REMOTES, planned_outputs, run_snakemake, write_config

pytestmark = pytest.mark.slow

BLOCK = "sst2_glove6b50d"
INITS = ["Xavier", "Pretrained", "Pretrained_Xavier"]


def test_tables_12_and_13_build_end_to_end_and_reuse_the_blocks_own_runs(tmp_path, tiny_mirror):
    cfg = write_config(
        tmp_path / "c.yaml",
        {
            "mirror": str(tiny_mirror),
            "outputs": ["table12", "table13"],
            "run_blocks": [BLOCK],
            "remotes": TINY_REMOTES,
            "model": {"max_len": 64},
            "train": {"mechanism_probe": 4},
            "blocks": {BLOCK: {"seeds": 2, "epochs": 1, "batch_size": 8, "initializers": INITS}},
            "table12": {"block": BLOCK, "bases": ["Pretrained_Xavier", "Xavier"], "scales": [1, 4]},
            "table13": {"block": BLOCK, "initializers": INITS, "lr": [1.0e-4, 1.0e-3]},
        },
    )
    args = ["--cores", "2", "--set-threads", "train=1", "--configfile", str(cfg)]
    plan = run_snakemake(["all", "-n", *args], cwd=tmp_path)
    trained = {f for f in planned_outputs(plan) if f.endswith("final.json")}
    # 3 initializers x 2 seeds at the block's lr (base), the same at lr 1e-3, and 2 bases x k = 4 x 2 seeds
    assert len(trained) == 6 + 6 + 4
    assert f"results/{BLOCK}/Pretrained_Xavier_x4/seed1/base/final.json" in trained
    assert f"results/{BLOCK}/Pretrained/seed0/lr1e-3/final.json" in trained

    run_snakemake(["all", *args], cwd=tmp_path)
    results = tmp_path / "results"
    table12 = pd.read_csv(results / "table12.csv")
    assert table12.k.tolist() == [1.0, 4.0]
    assert (table12.Pretrained_Xavier_n_seeds == 2).all() and (table12.content_diff_n_pairs == 2).all()
    assert table12.Xavier_diff_vs_k1.isna().tolist() == [True, False]
    assert "- Content (GloVe_Xavier − Xavier at the same k)" in (results / "table12.md").read_text()
    table13 = pd.read_csv(results / "table13.csv")
    assert table13.lr.tolist() == [1.0e-4, 1.0e-3] and table13.variant.tolist() == ["base", "lr1e-3"]
    assert set(table13.Pretrained_minus_Xavier_verdict) <= {"holds", "contradicted", "undecided"}
    for name in ("table12", "table13"):
        assert (results / f"{name}.png").stat().st_size > 1000
    final = json.loads((results / BLOCK / "Pretrained" / "seed0" / "lr1e-3" / "final.json").read_text())
    assert final["lr"] == 1.0e-3 and final["variant"] == "lr1e-3"
    scaled = json.loads((results / BLOCK / "Xavier_x4" / "seed0" / "base" / "final.json").read_text())
    assert scaled["lr"] == 1.0e-4 and scaled["initializer"] == "Xavier_x4"
