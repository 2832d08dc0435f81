"""Tables 12 and 13's sweeps: the Scaled initializer, the initializers and variants their outputs add to the run
sheet (existing runs keep their names and specs), the config check, and both builders on fabricated runs."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from conftest import md_has_row, result_set_config, save_runs
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError, lr_of
from embinit.layers.initializers import LayerSpec, fingerprint, initialize, mean_std
from embinit.workflow.config import lr_variants, scaled_initializers
from embinit.workflow.outputs import generated_initializers, layer_recipe, variants_of
from embinit.reports import comparison, sweeps
from embinit.workflow.runsheet import run_sheet
from embinit.workflow.specs import layer_spec, train_spec

SHAPE = (40, 6)
BLOCK = "sst2_glove6b50d"


def offline_config(overrides: dict | None = None) -> dict:
    return result_set_config("offline-cpu", overrides)


@pytest.mark.parametrize("base", ["Pretrained_Xavier", "Xavier"])
@pytest.mark.parametrize("k", [0.25, 4.0, 64.0])
def test_scaled_is_its_base_times_k_so_its_sigma_is_k_times_the_bases(base, k):
    pretrained = np.random.default_rng(1).normal(0.3, 2.0, size=SHAPE).astype(np.float32)
    layer = initialize("Scaled", pretrained, SHAPE, seed=2, params={"base": base, "k": k}, side="encoder")
    base_layer = initialize(base, pretrained, SHAPE, seed=2, side="encoder")
    np.testing.assert_allclose(layer, k * base_layer, rtol=1e-6)
    assert mean_std(layer)[1] == pytest.approx(k * mean_std(base_layer)[1], rel=1e-6)


def test_table12_names_k_1_as_its_base_and_every_other_k_as_a_scaled_layer():
    config = offline_config()
    doses = scaled_initializers(config["table12"])
    assert doses["Pretrained_Xavier"] == {"base": "Pretrained_Xavier", "k": 1.0}
    assert doses["Xavier_x0.25"] == {"base": "Xavier", "k": 0.25}
    assert len(doses) == 10
    generated = generated_initializers(config)
    assert sorted(generated) == sorted(set(doses) - {"Pretrained_Xavier", "Xavier"})
    assert generated["Pretrained_Xavier_x64"] == ("Scaled", {"base": "Pretrained_Xavier", "k": 64.0})


def test_a_scaled_layer_has_its_own_spec_and_a_configured_ones_is_unchanged():
    config = offline_config()
    spec = layer_spec(config, BLOCK, "Xavier_x4", 0, "encoder")
    assert (spec.initializer, spec.params) == ("Scaled", {"base": "Xavier", "k": 4.0})
    assert spec.fingerprint == fingerprint("Scaled", {"base": "Xavier", "k": 4.0})
    assert spec.fingerprint != layer_spec(config, BLOCK, "Xavier_x16", 0, "encoder").fingerprint
    own = layer_spec(config, BLOCK, "Pretrained_Xavier", 0, "encoder")
    assert own == LayerSpec("Pretrained_Xavier", {}, fingerprint("Pretrained_Xavier"), 0, 50, "encoder")
    assert layer_recipe(config, "Pretrained_Shuffled") == ("Pretrained_Shuffled", {"mode": "rows_columns"})


def test_table13_maps_the_blocks_own_lr_to_base_and_every_other_to_a_variant_with_that_lr():
    config = offline_config()
    assert lr_variants(config) == {"base": 1e-4, "lr3e-4": 3e-4, "lr1e-3": 1e-3, "lr3e-3": 3e-3}
    variants = variants_of(config)
    assert variants["lr1e-3"] == {**config["variants"]["base"], "lr": 1e-3}
    assert variants["base"] == config["variants"]["base"]
    spec = train_spec(config, BLOCK, "Pretrained", 1, "lr1e-3", False)
    assert spec.lr == 1e-3 and spec.run["variant"] == "lr1e-3" and spec.variant["lr"] == 1e-3
    base = train_spec(config, BLOCK, "Pretrained", 1, "base", False)
    assert base.lr == lr_of(config, BLOCK) and base.variant == config["variants"]["base"]
    assert dataclasses.replace(spec, lr=base.lr, variant=base.variant, run=base.run) == base


def test_the_run_sheet_reuses_the_blocks_own_runs_and_adds_only_the_new_cells():
    config = offline_config()
    sheet = run_sheet(config, {"final": "{block}/{init}/seed{seed}/{variant}/final.json"})
    t12, t13 = sheet[sheet.output == "table12"], sheet[sheet.output == "table13"]
    assert len(t12) == 50 and len(t13) == 60
    table1 = set(sheet.final[(sheet.output == "table1") & (sheet.block == BLOCK)])
    assert len(set(t12.final) - table1) == 40 and len(set(t13.final) - table1) == 45
    assert set(t12.final) & table1 == {f"{BLOCK}/{i}/seed{s}/base/final.json" for i in ("Pretrained_Xavier", "Xavier")
                                       for s in range(5)}  # fmt: skip
    assert set(t12.label) >= {"GloVe_Xavier", "GloVe_Xavier_x4", "Xavier_x0.25"}
    assert set(t13.variant) == {"base", "lr3e-4", "lr1e-3", "lr3e-3"}
    assert set(t13.pos_encoding) == {"sinusoidal"}
    # no other output's rows change: Table 5 still counts the block's base runs only
    assert set(sheet.initializer[sheet.output == "table5"]) <= set(config["initializers"])


def test_the_shipped_sweeps_pass_the_check_and_a_bad_one_is_named():
    check(offline_config())
    with pytest.raises(ConfigError, match=r"config key Scaled\(Pretrained_x4\).base: 'Pretrained' is not one of"):
        check(offline_config({"table12": {"bases": ["Pretrained_Xavier", "Pretrained"], "scales": [1, 4]}}))
    with pytest.raises(ConfigError, match=r"config key table13.initializers\[1\]: unknown name 'Pretrained_Shuffled'"):
        check(offline_config({"outputs": ["table13"], "table13": {"initializers": ["Xavier", "Pretrained_Shuffled"]}}))
    not_asked_for = {"outputs": ["table12"], "table13": {"initializers": ["Xavier", "Pretrained_Shuffled"]}}
    check(offline_config(not_asked_for))
    with pytest.raises(ConfigError, match="config key variants.lr1e-3: the name of a sweep's variant"):
        check(offline_config({"variants": {"lr1e-3": {"pos_encoding": "none", "embedding_trainable": True}}}))


CONFIG = {
    "tasks": {"sst2": {"kind": "classification", "lr": 1e-4}},
    "sources": {"glove6b50d": {"display": "GloVe 6B 50d"}},
    "blocks": {BLOCK: {"task": "sst2", "sources": {"encoder": "glove6b50d"}, "family": "GloVe"}},
    "variants": {"base": {"pos_encoding": "sinusoidal", "embedding_trainable": True}},
    "model": {"init": "recipe", "final_norm": True},  # the run sheet names the recipe's switches
    "train": {"batching": "random"},
    "initializer_params": {},
    "table12": {"block": BLOCK, "bases": ["Pretrained_Xavier", "Xavier"], "scales": [0.25, 1, 4, 64]},
    "table13": {"block": BLOCK, "initializers": ["Xavier", "Pretrained", "Pretrained_Xavier"], "lr": [1e-4, 1e-3]},
}


def record(init, seed, acc, variant="base", lr=1e-4):
    return {"block": BLOCK, "task": "sst2", "kind": "classification", "initializer": init, "seed": seed,
            "variant": variant, "best_epoch": 2, "best_valid_acc": acc, "lr": lr}  # fmt: skip


def test_table12_pairs_each_k_with_k_1_and_the_two_bases_at_each_k(tmp_path):
    doses = scaled_initializers(CONFIG["table12"])
    offsets = [0.0, 0.01, -0.01, 0.002]  # per seed: the same shift in every cell, so pairs are tight
    glove = {0.25: 0.84, 1: 0.83, 4: 0.80, 64: 0.70}  # falls with k
    xavier = {0.25: 0.82, 1: 0.82, 4: 0.81, 64: 0.75}
    records = [
        record(
            name,
            s,
            {"Pretrained_Xavier": glove, "Xavier": xavier}[dose["base"]][dose["k"]] + offsets[s] + 1e-3 * (s % 2),
        )
        for name, dose in doses.items()
        for s in range(4)
    ]
    runs = save_runs(tmp_path, records[::-1], CONFIG)  # Xavier's runs first: the bases' order is the config's
    runs = runs.assign(**{key: [doses[i][key] for i in runs.initializer] for key in ("base", "k")})
    table = sweeps.table12(runs, CONFIG["table12"]["bases"], tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.png")
    assert table.k.tolist() == [0.25, 1.0, 4.0, 64.0]
    assert (table.Pretrained_Xavier_n_seeds == 4).all()
    at64 = table.set_index("k").loc[64.0]
    assert at64.Pretrained_Xavier_mean == pytest.approx(100 * (0.70 + np.mean(offsets) + 5e-4))
    assert at64.Pretrained_Xavier_diff_vs_k1 == pytest.approx(-13.0)
    assert at64.Pretrained_Xavier_diff_vs_k1_n_pairs == 4 and at64.Pretrained_Xavier_diff_vs_k1_ci_high < 0
    assert np.isnan(table.set_index("k").loc[1.0].Xavier_diff_vs_k1)  # k = 1 against itself: no Δ
    assert at64.content_diff == pytest.approx(-5.0) and at64.content_diff_verdict == "contradicted"
    assert table.set_index("k").loc[0.25].content_diff_verdict == "holds"
    md = (tmp_path / "t.md").read_text()
    assert "GloVe_Xavier: accuracy falls monotonically with k (means); below k = 1's at k = 4, 64." in md
    assert "Xavier: accuracy does not fall monotonically" in md
    assert "helps (holds) at k = 0.25, 1; hurts (contradicted) at k = 4, 64" in md
    assert md_has_row(md, "64", f"{at64.Pretrained_Xavier_mean:.1f} [{at64.Pretrained_Xavier_ci_low:.1f}, "
                      f"{at64.Pretrained_Xavier_ci_high:.1f}] (4)")  # fmt: skip
    assert (tmp_path / "t.png").stat().st_size > 1000
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "t.csv"), table, check_dtype=False)
    claims = comparison.claims(12, pd.read_csv(tmp_path / "t.csv")).set_index("claim")
    assert len(claims) == 3 * 2 + 4  # k = 1 is no claim against itself; content at each k
    assert claims.loc["GloVe_Xavier at k = 64 below k = 1"].verdict == "holds"
    assert claims.loc["Xavier at k = 0.25 below k = 1"].verdict == "undecided"  # Xavier x 0.25 = Xavier x 1 + noise
    assert claims.loc["GloVe_Xavier above Xavier at k = 64"].tolist()[:5] == [
        12,
        pytest.approx(-5.0),
        at64.content_diff_ci_low,
        at64.content_diff_ci_high,
        4,
    ]
    assert claims.loc["GloVe_Xavier above Xavier at k = 64"].verdict == "contradicted"


def test_table13_reads_each_runs_lr_and_judges_finding_1_at_each(tmp_path):
    # at lr 1e-4 Finding 1 holds (GloVe 5 below Xavier, GloVe_Xavier 5 above GloVe); at 1e-3 GloVe catches up
    accs = {1e-4: {"Xavier": 0.82, "Pretrained": 0.77, "Pretrained_Xavier": 0.82},
            1e-3: {"Xavier": 0.80, "Pretrained": 0.81, "Pretrained_Xavier": 0.80}}  # fmt: skip
    variants = {1e-4: "base", 1e-3: "lr1e-3"}
    records = [
        record(init, s, acc + 0.01 * s + 1e-3 * (s == 1 and init == "Pretrained"), variants[lr], lr)
        for lr, by_init in accs.items()
        for init, acc in by_init.items()
        for s in range(3)
    ]
    runs = save_runs(tmp_path, records, CONFIG)
    table = sweeps.table13(runs, tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.png").set_index("lr")
    assert table.loc[1e-4].variant == "base" and table.loc[1e-3].variant == "lr1e-3"
    assert table.loc[1e-4].Pretrained_minus_Xavier_verdict == "holds"
    assert table.loc[1e-4].Pretrained_Xavier_minus_Pretrained_verdict == "holds"
    assert table.loc[1e-3].Pretrained_minus_Xavier_verdict == "contradicted"
    assert table.loc[1e-3].Pretrained_Xavier_minus_Pretrained == pytest.approx(-1.0 - 1e-3 / 3 * 100, rel=1e-3)
    md = (tmp_path / "t.md").read_text()
    assert "- GloVe < Xavier: holds at lr = 0.0001; contradicted at lr = 0.001; undecided at lr = none." in md
    assert (tmp_path / "t.png").stat().st_size > 1000
    assert json.loads((tmp_path / BLOCK / "Xavier" / "seed0" / "lr1e-3" / "final.json").read_text())["lr"] == 1e-3
    claims = comparison.claims(13, pd.read_csv(tmp_path / "t.csv")).set_index("claim")
    assert claims.verdict.to_dict() == {
        "GloVe < Xavier at lr = 0.0001": "holds",
        "GloVe < Xavier at lr = 0.001": "contradicted",
        "GloVe_Xavier > GloVe at lr = 0.0001": "holds",
        "GloVe_Xavier > GloVe at lr = 0.001": "contradicted",
    }
