"""Table 14 (beyond the paper): the field's initializers on config/offline-cpu.yaml's own blocks, every run under the
paper's recipe beside its own Xavier and Pretrained_Xavier controls; the config check of its `controls`; the builder
on fabricated runs and layers; its claims in the paper comparison's part beyond the paper."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from conftest import REPO, load_default_config, md_has_row, result_set_config, run_snakemake, save_runs
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError, dim_of
from embinit.layers.position_table import sinusoidal_table
from embinit.workflow.outputs import OUTPUTS
from embinit.reports import builders, comparison, field
from embinit.workflow.runsheet import run_sheet
from embinit.workflow.specs import train_spec

# The runs config/offline-cpu.yaml plans for Table 14: block -> (its initializers, seeds)
PLANNED = {
    "sst2_glove6b50d_field": (
        ["Xavier", "Pretrained", "Pretrained_Xavier", "Pretrained_Gaussian", "Pretrained_Gaussian_xavier",
         "Pretrained_RowNorm", "Pretrained_Whitened"], 5),
    "sst2_minilm_field": (
        ["Xavier", "Pretrained", "Pretrained_Xavier", "Pretrained_Gaussian", "Pretrained_Gaussian_xavier",
         "Pretrained_RowNorm", "Pretrained_Whitened"], 5),
    "sst2_minilm_words50_field": (["Pretrained_PCA", "Pretrained_PCA_projection"], 5),
    "multi30k_glove6b50d_field": (
        ["Xavier", "Pretrained", "Pretrained_Xavier", "Pretrained_Gaussian_xavier", "Pretrained_RowNorm",
         "Pretrained_Whitened"], 3),
    "multi30k_minilm_words50_field": (["Pretrained_PCA"], 3),
}  # fmt: skip
N_RUNS = sum(len(inits) * seeds for inits, seeds in PLANNED.values())
ALL_RUNS = [name for name, out in OUTPUTS.items() if out.selects.every_run]  # the run table, TensorBoard, layer export


def offline(overrides: dict | None = None) -> dict:
    return result_set_config("offline-cpu", overrides)


def test_offline_plans_table14s_runs_each_under_the_recipe_and_apart_from_the_committed_records():
    config = offline()
    sheet = run_sheet(config, {})
    runs = sheet[sheet.output == "table14"]
    assert N_RUNS == len(runs) == 101
    assert Counter(zip(runs.block, runs.initializer)) == {
        (b, i): seeds for b, (inits, seeds) in PLANNED.items() for i in inits
    }
    # every run, controls included, under the paper's recipe, whatever the result set's own model and batches say
    assert (config["model"]["init"], config["train"]["batching"]) == ("legacy", "bucketed")
    assert set(zip(runs.variant, runs.model_init, runs.final_norm, runs.batching)) == {
        ("base_recipe", "recipe", True, "random")
    }
    spec = train_spec(config, "multi30k_glove6b50d_field", "Xavier", 2, "base_recipe", False)
    assert (spec.model["init"], spec.model["final_norm"], spec.train["batching"]) == ("recipe", True, "random")
    assert (spec.epochs, spec.lr, spec.batch_size) == (30, 1.0e-3, 64)
    # its blocks are its own but for Table 3 (issue 56), no other table selects them (the run table, TensorBoard and
    # the layer export list every run); Table 3's trainable + P cells are three of Table 14's GloVe-block rows
    assert "table14" in config["outputs"]
    built = sheet[sheet.output.isin(config["outputs"]) & ~sheet.output.isin(["table14", "table3", *ALL_RUNS])]
    assert not set(built.block) & set(PLANNED) and "base_recipe" not in set(built.variant)
    table3 = sheet[sheet.output == "table3"]
    assert set(table3.block) == {"multi30k_glove6b50d_field"}
    shared = table3[table3.variant == "base_recipe"]
    assert set(zip(shared.initializer, shared.seed)) == {
        (init, seed) for init in ("Xavier", "Pretrained", "Pretrained_Xavier") for seed in range(3)
    }
    assert set(zip(shared.block, shared.initializer, shared.seed)) <= set(zip(runs.block, runs.initializer, runs.seed))
    # the methods beyond the paper stay out of the committed blocks' initializers (Table 1's MiniLM rows)
    assert set(built.initializer[built.block == "sst2_minilm"]) == {
        "Xavier", "Pretrained", "Pretrained_Xavier", "Xavier_Pretrained", "Pretrained_Shuffled"
    }  # fmt: skip
    assert dim_of(config, "multi30k_minilm_words50_field") == 50 and dim_of(config, "sst2_minilm_field") == 384


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"blocks": {"sst2_minilm_words50_field": {"epochs": 2}}},
         "table14.controls.sst2_minilm_words50_field: block 'sst2_minilm_words50_field' has epochs 2, its controls' "
         "block 'sst2_glove6b50d_field' 5"),
        ({"table14": {"controls": {"sst2_minilm_words50_field": "sst2_minilm_words50_field"}}},
         "a block's controls are its own runs by default"),
        ({"table14": {"blocks": ["sst2_glove6b50d_field", "sst2_minilm_words50_field", "multi30k_minilm_words50_field"],
                      "controls": {"multi30k_minilm_words50_field": "sst2_glove6b50d_field"}}},
         "has task 'multi30k', its controls' block 'sst2_glove6b50d_field' 'sst2'"),
        ({"table14": {"controls": {"sst2_minilm_words50_field": "sst2_glove6b50d"}}},
         "config key table14.controls.sst2_minilm_words50_field: unknown name 'sst2_glove6b50d'"),
        ({"blocks": {"sst2_glove6b50d_field": {"seeds": 3}}},
         "needs Xavier and Pretrained_Xavier runs at every seed of 'sst2_minilm_words50_field' (5); it lacks seeds"),
        ({"table14": {"variant": "recipe"}}, "config key table14.variant: unknown name 'recipe'"),
    ],
)  # fmt: skip
def test_table14s_controls_must_train_the_same_model_and_its_names_be_defined(overrides, message):
    with pytest.raises(ConfigError, match="^config key table14") as error:
        check(offline(overrides))
    assert message in str(error.value)


def test_a_config_without_table14s_section_has_no_table14_and_cannot_ask_for_it():
    config = load_default_config()
    assert "table14" not in config and not (run_sheet(config, {}).output == "table14").any()
    assert OUTPUTS["table14"].config_of(config) == {} and OUTPUTS["table14"].raw_files(config) == {}
    config["outputs"] = [*config["outputs"], "table14"]
    last = len(config["outputs"]) - 1
    with pytest.raises(ConfigError, match=rf"^config key outputs\[{last}\]: table14 reads config section 'table14'"):
        check(config)
    # where it is, its rule's params hold the section, the model (P's base) and its blocks' sources
    section = OUTPUTS["table14"].config_of(offline())
    assert section["table14"] == offline()["table14"] and section["model"]["pos_base"] == 10000
    assert sorted(section["blocks"]) == sorted(PLANNED)


# Fabricated scores per seed: accuracy (fraction) for SST-2, paper BLEU for Multi30k
SST2 = {
    "Xavier": [0.800, 0.810, 0.820, 0.805, 0.815],
    "Pretrained": [0.770, 0.760, 0.780, 0.765, 0.775],  # below both controls
    "Pretrained_Xavier": [0.830, 0.835, 0.845, 0.830, 0.840],
    "Pretrained_RowNorm": [0.835, 0.830, 0.850, 0.820, 0.840],  # above Xavier, level with the proposal
}
WORDS = {"Pretrained_PCA": [0.860, 0.870, 0.880, 0.865, 0.875]}  # paired with the GloVe block's controls
BLEU = {"Xavier": [30.0, 31.0, 32.0], "Pretrained_Xavier": [31.0, 31.5, 33.5]}
SIGMA = {"Xavier": 0.01, "Pretrained": 0.6, "Pretrained_Xavier": 0.01, "Pretrained_RowNorm": 0.02,
         "Pretrained_PCA": 0.011}  # fmt: skip
SECTION = {"controls": {"sst2_minilm_words50_field": "sst2_glove6b50d_field"}, "pos_rows": 300}


def _record(block, init, seed, score):
    kind = "translation" if block.startswith("multi30k") else "classification"
    scores = (
        {"test_paper_bleu": score, "test_sacrebleu": score - 1} if kind == "translation" else {"best_valid_acc": score}
    )
    return {"block": block, "task": block.split("_")[0], "kind": kind, "initializer": init, "seed": seed,
            "variant": "base_recipe", "best_epoch": 2, **scores}  # fmt: skip


def _fabricated(tmp_path):
    """Table 14's runs of three blocks and the seed-0 layer of each initializer (rows of sigma SIGMA), as the run
    and layer sheets give them to the builder."""
    grid = {"sst2_glove6b50d_field": SST2, "sst2_minilm_words50_field": WORDS, "multi30k_glove6b50d_field": BLEU}
    records = [
        _record(block, init, seed, score)
        for block, scores in grid.items()
        for init, seeds in scores.items()
        for seed, score in enumerate(seeds)
    ]
    runs = save_runs(tmp_path / "runs", records, offline())
    layers = []
    for (block, init), _ in runs.groupby(["block", "initializer"], sort=False):
        path = tmp_path / f"{block}_{init}.npy"
        np.save(path, np.random.default_rng(0).normal(0.1, SIGMA[init], size=(400, 50)).astype(np.float32))
        side = "decoder" if block.startswith("multi30k") else "encoder"
        layers.append({"block": block, "initializer": init, "side": side, "path": str(path)})
    return runs, pd.DataFrame(layers)


def _build(tmp_path):
    runs, layers = _fabricated(tmp_path)
    out = [tmp_path / f"table14.{suffix}" for suffix in ("csv", "md", "png")]
    return field.table14(runs, layers, SECTION, 10000, *out), layers


def _paired(a, b) -> tuple[float, float, float]:
    d = np.subtract(a, b) * 100
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half


def test_table14_pairs_each_method_with_its_blocks_controls_and_judges_it(tmp_path):
    table, layers = _build(tmp_path)
    row = table.set_index(["block", "initializer"]).loc
    assert list(zip(table.block, table.initializer))[:4] == [("sst2_glove6b50d_field", i) for i in SST2]
    assert len(table) == len(SST2) + len(WORDS) + len(BLEU)

    rownorm = row["sst2_glove6b50d_field", "Pretrained_RowNorm"]
    assert rownorm.label == "GloVe_RowNorm" and rownorm.metric == "accuracy_pct" and rownorm.score_n_seeds == 5
    assert rownorm.score_mean == pytest.approx(100 * np.mean(SST2["Pretrained_RowNorm"]))
    diff, low, high = _paired(SST2["Pretrained_RowNorm"], SST2["Xavier"])
    assert (rownorm.vs_xavier, rownorm.vs_xavier_ci_low, rownorm.vs_xavier_ci_high) == pytest.approx((diff, low, high))
    assert rownorm.vs_xavier_verdict == "holds" and rownorm.vs_proposal_verdict == "undecided"
    pretrained = row["sst2_glove6b50d_field", "Pretrained"]
    assert pretrained.vs_xavier_verdict == pretrained.vs_proposal_verdict == "contradicted"
    # a control is no claim against itself
    assert row["sst2_glove6b50d_field", "Xavier"].vs_xavier_n_pairs == 0
    assert row["sst2_glove6b50d_field", "Pretrained_Xavier"].vs_proposal_n_pairs == 0
    assert row["sst2_glove6b50d_field", "Pretrained_Xavier"].vs_xavier_verdict == "holds"

    # a block without its own controls pairs with the block `controls` names, and names its proposal by that family
    pca = row["sst2_minilm_words50_field", "Pretrained_PCA"]
    assert (pca.controls, pca.proposal_label, pca.label) == ("sst2_glove6b50d_field", "GloVe_Xavier", "BERT_PCA")
    assert pca.vs_proposal == pytest.approx(_paired(WORDS["Pretrained_PCA"], SST2["Pretrained_Xavier"])[0])
    assert pca.vs_xavier_n_pairs == pca.vs_proposal_n_pairs == 5 and pca.vs_proposal_verdict == "holds"

    bleu = row["multi30k_glove6b50d_field", "Pretrained_Xavier"]
    assert bleu.metric == "bleu" and bleu.score_mean == pytest.approx(np.mean(BLEU["Pretrained_Xavier"]))
    assert bleu.vs_xavier == pytest.approx(np.mean(np.subtract(BLEU["Pretrained_Xavier"], BLEU["Xavier"])))

    # each layer's sigma, and its rows' scale at the input (x sqrt(D)) against P's first pos_rows rows
    layer = np.load(layers.path[layers.initializer == "Pretrained"].iloc[0])
    p_sigma = sinusoidal_table(300, 50, 10000).astype(np.float64).std(ddof=1)
    assert pretrained.sigma == pytest.approx(layer.astype(np.float64).std(ddof=1))
    assert pretrained.sigma_vs_p == pytest.approx(pretrained.sigma * math.sqrt(50) / p_sigma)
    assert pretrained.sigma_vs_p > 1 > row["sst2_glove6b50d_field", "Xavier"].sigma_vs_p


def _shown(mean, low, high, n=None, sign="") -> str:
    return f"{mean:{sign}.1f} [{low:{sign}.1f}, {high:{sign}.1f}]" + (f" ({n})" if n else "")


def test_table14s_markdown_and_figure(tmp_path):
    _build(tmp_path)
    md = (tmp_path / "table14.md").read_text()
    assert md.startswith("# Table 14 (beyond the paper): the field's initializers")
    assert "## sst2_minilm_words50_field\n\nSST2, D = 50" in md and "controls: the runs of sst2_glove6b50d_field" in md
    assert "decoder=GloVe-6B-50d (stand-in for GloVe 840B); σ of the decoder's layer." in md
    assert md_has_row(md, "Method", "Acc % [95% CI] (n)", "σ", "σ√D / σ_P", "Δ vs Xavier", "verdict")
    acc = 100 * np.array(SST2["Xavier"])
    low, high = stats.t.interval(0.95, 4, acc.mean(), acc.std(ddof=1) / math.sqrt(5))
    below = _shown(*_paired(SST2["Xavier"], SST2["Pretrained_Xavier"]), sign="+")
    assert md_has_row(md, "Xavier", _shown(acc.mean(), low, high, 5))
    assert md_has_row(md, "-", "-", below, "contradicted")  # Xavier: no claim against itself, below the proposal
    assert "- Above Xavier: holds for GloVe_Xavier, GloVe_RowNorm; contradicted for GloVe; undecided for none." in md
    assert "- Above GloVe_Xavier: holds for BERT_PCA; contradicted for none; undecided for none." in md
    assert md_has_row(md, "Method", "BLEU [95% CI] (n)")
    assert (tmp_path / "table14.png").stat().st_size > 10_000


def test_table14s_claims_join_the_paper_comparisons_part_beyond_the_paper(tmp_path):
    table, _ = _build(tmp_path)
    claims = comparison.claims(14, pd.read_csv(tmp_path / "table14.csv")).set_index("claim")
    assert claims.verdict["GloVe_RowNorm above Xavier (sst2_glove6b50d_field)"] == "holds"
    assert claims.verdict["BERT_PCA above GloVe_Xavier (sst2_minilm_words50_field)"] == "holds"
    assert claims.verdict["GloVe above GloVe_Xavier (sst2_glove6b50d_field)"] == "contradicted"
    assert "Xavier above Xavier (sst2_glove6b50d_field)" not in claims.index  # no claim against itself
    assert len(claims) == 2 * len(table) - 2 * 2  # the two blocks with own controls: each control skips itself
    beyond = comparison._beyond_markdown({14: claims.reset_index()})
    assert "the claims of Table 14, each a difference of accuracy (%) or BLEU" in beyond
    assert md_has_row(beyond, "14", "GloVe above Xavier (sst2_glove6b50d_field)")


@pytest.mark.slow  # a Snakemake dry run: about 12 s
def test_a_dry_run_of_table14_plans_exactly_its_runs(tmp_path):
    """From an empty directory, the target table14 of config/offline-cpu.yaml plans one train job per planned run and
    no other."""
    config = str(REPO / "config" / "offline-cpu.yaml")
    proc = run_snakemake(["--configfile", config, "-n", "--cores", "2", "table14"], cwd=tmp_path)
    lines = [line.split() for line in proc.stdout.splitlines()]
    stats_rows = {fields[0]: int(fields[1]) for fields in lines if len(fields) == 2 and fields[1].isdigit()}
    assert stats_rows["train"] == N_RUNS, proc.stdout[-3000:]
    trained = {
        tuple(value.split("=")[1] for value in " ".join(fields[1:]).split(", "))
        for fields in lines
        if fields[:1] == ["wildcards:"] and "variant=base_recipe" in fields[-1]
    }
    planned = {(b, i, str(seed), "base_recipe") for b, (inits, seeds) in PLANNED.items() for i in inits
               for seed in range(seeds)}  # fmt: skip
    assert trained == planned


def test_the_rules_builder_hands_table14_its_rows_layers_and_config_sections(tmp_path):
    """builders.table14 as its rule calls it: the run and layer sheets' rows, and the config sections of
    Output.config_of (the section, and the model for P's base)."""
    runs, layers = _fabricated(tmp_path)
    config = OUTPUTS["table14"].config_of(offline({"table14": {"pos_rows": 300}}))
    out = {suffix: str(tmp_path / f"t.{suffix}") for suffix in ("csv", "md", "png")}
    job = SimpleNamespace(
        params=SimpleNamespace(rows=runs.to_dict("records"), layers=layers.to_dict("records"), config=config),
        output=SimpleNamespace(**out),
    )
    table = builders.table14(job)
    (tmp_path / "direct").mkdir()
    expected, _ = _build(tmp_path / "direct")
    pd.testing.assert_frame_equal(table, expected)
    assert (tmp_path / "t.png").is_file()
