"""embinit.reports.tables and .figures on fabricated runs: aggregation, formatting, sources, paired statistics,
layouts, Figure 1."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from conftest import STAND_IN, md_has_row, md_rows, save_runs, write_metrics
from conftest import TABLES_CONFIG as CONFIG
from embinit.reports import figures, tables
from embinit.reports.format import format_mean_std, markdown_table

TASKS = {"sst2": "classification", "mnli": "classification", "multi30k": "translation"}


def run(block, init, seed, variant="base", best_epoch=3, **metrics):
    task = CONFIG["blocks"][block]["task"]
    out = {
        "block": block,
        "task": task,
        "kind": TASKS[task],
        "initializer": init,
        "seed": seed,
        "variant": variant,
        "best_epoch": best_epoch,
        "params": 1_000_000,
        "epochs": 5,
        "batch_size": 128,
        "vocab_sizes": {"encoder": 100, "decoder": 80} if task == "multi30k" else {"encoder": 100},
        "train_size": 500,
        "train_minutes_per_epoch": 1.0 + seed,
    }
    return {**out, **metrics}


def save(tmp_path, runs, config=CONFIG):
    """Write runs as <block>/<init>/seed<k>/<variant>/final.json: the run sheet's rows that name them."""
    return save_runs(tmp_path, runs, config)


def table1(runs, tmp_path):
    """Table 1 of the rows a run sheet gives it: no Xavier_Pretrained (that is Table 7)."""
    rows = runs[runs.initializer != "Xavier_Pretrained"]
    return tables.result_table(rows, tmp_path / "t1.csv", tmp_path / "t1.md", "Table 1")


def table7(runs, tmp_path):
    """Table 7 of the rows a run sheet gives it: the blocks with the control, Xavier as the reference only."""
    rows = runs[runs.block.isin(set(runs.block[runs.initializer == "Xavier_Pretrained"]))]
    rows = rows[rows.initializer.isin(["Xavier", "Xavier_Pretrained"])]
    return tables.result_table(rows, tmp_path / "t7.csv", tmp_path / "t7.md", "Table 7", references=["Xavier"])


SST2 = {"Xavier": [0.80, 0.82, 0.84], "Pretrained": [0.83, 0.86, 0.86], "Pretrained_Xavier": [0.85, 0.85, 0.88]}


def grid(tmp_path):
    runs = [
        run("sst2_glove6b50d", init, seed, best_epoch=seed + 1, best_valid_acc=acc)
        for init, accs in SST2.items()
        for seed, acc in enumerate(accs)
    ]
    runs += [
        run(
            "mnli_bert",
            init,
            seed,
            best_epoch=2,
            best_valid_acc=0.6 + 0.01 * seed,
            best_test_acc=0.61,
            best_test_epoch=4 + seed,
        )
        for init in ["Xavier", "Xavier_Pretrained"]
        for seed in range(2)
    ]
    runs += [
        run(
            "multi30k_glove6b50d",
            init,
            seed,
            test_paper_bleu=30.0 + seed + (init == "Pretrained"),
            test_sacrebleu=29.0 + seed,
        )
        for init in ["Xavier", "Pretrained"]
        for seed in range(4)
    ]
    return save(tmp_path, runs)


def test_mean_std_n_seeds_and_epoch(tmp_path):
    summary = table1(grid(tmp_path), tmp_path)
    row = summary[(summary.block == "sst2_glove6b50d") & (summary.initializer == "Xavier")].iloc[0]
    assert row["mean"] == pytest.approx(82.0)
    assert row["std"] == pytest.approx(2.0)  # sample std, ddof=1
    assert row.n_seeds == 3 and row.mean_best_epoch == pytest.approx(2.0)
    csv = pd.read_csv(tmp_path / "t1.csv")
    assert {
        "mean",
        "std",
        "n_seeds",
        "mean_best_epoch",
        "diff_vs_xavier",
        "p_paired_t",
        "ci_low",
        "ci_high",
        "sources",
        "source_display",
    } <= set(csv.columns)


def test_format_mean_std():
    assert format_mean_std(37.2999, 0.4449) == "37.3 (0.4)"
    assert format_mean_std(37.3, np.nan) == "37.3"  # one seed: no std
    assert format_mean_std(np.nan, np.nan) == "-"


def test_markdown_table_keeps_cells_and_aligns_numbers_right():
    rows = [["**GloVe**", "", "", ""], ["GloVe", "50.0", "-", "2"], ["GloVe_Xavier", "51.0 (0.3)", "-1.5", "2 / 3"]]
    md = markdown_table(["Embedding", "Acc (σ)", "Δ", "Epoch"], rows)
    lines = md.splitlines()
    assert md.endswith("\n") and len(lines) == 5
    assert md_rows(md) == [["Embedding", "Acc (σ)", "Δ", "Epoch"], *rows]  # cells verbatim: "50.0" stays
    aligns = [c.strip() for c in lines[1].strip("|").split("|")]
    assert aligns[0].startswith(":") and not aligns[0].endswith(":")  # text: left
    assert all(a.endswith(":") and not a.startswith(":") for a in aligns[1:])  # numbers: right
    assert md_rows(markdown_table(["A", "B"], [])) == [["A", "B"]]


def test_one_seed_has_blank_std(tmp_path):
    runs = save(tmp_path, [run("sst2_glove6b50d", "Xavier", 0, best_valid_acc=0.5)])
    summary = table1(runs, tmp_path)
    assert np.isnan(summary["std"].iloc[0])
    assert md_has_row((tmp_path / "t1.md").read_text(), "Xavier", "50.0")


def test_stand_in_source_is_named_in_every_row(tmp_path):
    table1(grid(tmp_path), tmp_path)
    csv = pd.read_csv(tmp_path / "t1.csv")
    sst2 = csv[csv.block == "sst2_glove6b50d"]
    assert set(sst2.sources) == {"encoder=glove6b50d"}
    assert set(sst2.source_display) == {f"encoder={STAND_IN}"}
    assert set(csv[csv.block == "multi30k_glove6b50d"].sources) == {"encoder=none; decoder=glove6b50d"}
    assert STAND_IN in (tmp_path / "t1.md").read_text()


def test_table1_and_table7_layout(tmp_path):
    runs = grid(tmp_path)
    table1(runs, tmp_path)
    table7(runs, tmp_path)
    t1, t7 = (tmp_path / "t1.md").read_text(), (tmp_path / "t7.md").read_text()
    header = md_rows(t1)[0]
    assert header[:8] == [
        "Embedding",
        "SST2 Acc (σ)",
        "Epoch",
        "MNLI Match (σ)",
        "MNLI Mismatch (σ)",
        "Epoch",
        "Multi30k BLEU (σ)",
        "Epoch",
    ]
    assert md_has_row(t1, "GloVe_Xavier", "86.0 (1.7)", "2.0")
    assert "Xavier_BERT" not in t1 and md_has_row(t7, "Xavier_BERT", "60.5 (0.7)", "61.0 (0.0)", "2.0 / 4.5")
    assert set(pd.read_csv(tmp_path / "t7.csv").initializer) == {"Xavier_Pretrained"}


def test_compare_to_xavier_pairs_by_seed():
    values = pd.Series([2.0, 5.0, 3.0, 9.0], index=[0, 1, 2, 7])
    xavier = pd.Series([1.0, 1.5, 2.0, 3.0], index=[2, 1, 0, 3])  # seed 7 / 3 have no partner
    out = tables.compare_to_xavier(values, xavier)
    d = np.array([2.0 - 2.0, 5.0 - 1.5, 3.0 - 1.0])
    assert out["n_pairs"] == 3 and out["diff_vs_xavier"] == pytest.approx(d.mean())
    assert out["p_paired_t"] == pytest.approx(stats.ttest_rel([2.0, 5.0, 3.0], [2.0, 1.5, 1.0]).pvalue)
    one = tables.compare_to_xavier(pd.Series([2.0], index=[0]), xavier)
    assert one["diff_vs_xavier"] == 0.0 and one["n_pairs"] == 1
    assert np.isnan([one["p_paired_t"], one["ci_low"], one["ci_high"]]).all()
    none = tables.compare_to_xavier(pd.Series([2.0], index=[9]), xavier)
    assert none["n_pairs"] == 0 and np.isnan(none["diff_vs_xavier"]) and np.isnan(none["ci_low"])


def test_the_interval_is_the_paired_t_interval_and_agrees_with_the_t_test():
    d = np.array([1.0, 2.0, 4.0])
    out = tables.paired_difference(d)
    low, high = stats.t.interval(0.95, 2, loc=d.mean(), scale=stats.sem(d))
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((low, high))
    assert out["p_paired_t"] > 0.05 and out["ci_low"] < 0 < out["ci_high"]  # both say: not decided
    for draws in (np.random.default_rng(k).normal(1.0, 0.5, size=n) for k, n in enumerate([3, 5, 30])):
        out = tables.paired_difference(draws)  # the interval excludes zero exactly when p < 0.05
        assert (out["ci_low"] > 0 or out["ci_high"] < 0) == (out["p_paired_t"] < 0.05)
    same = tables.paired_difference([1.5, 1.5, 1.5])  # every seed differs by the same amount
    assert (same["ci_low"], same["ci_high"], same["p_paired_t"]) == (1.5, 1.5, 0.0)


def test_t_interval_is_scipys_and_blank_without_a_std():
    means, stds, n = pd.Series([1.0, 2.0, 3.0]), pd.Series([np.nan, 1.0, 2.0]), pd.Series([1, 2, 5])
    low, high = tables.t_interval(means, stds, n)  # one seed: no std, so no interval
    assert np.isnan([low[0], high[0]]).all()
    for k in (1, 2):
        expected = stats.t.interval(0.95, n[k] - 1, loc=means[k], scale=stds[k] / np.sqrt(n[k]))
        assert (low[k], high[k]) == pytest.approx(expected)


def test_table1_paired_columns(tmp_path):
    summary = table1(grid(tmp_path), tmp_path)
    row = summary[(summary.block == "multi30k_glove6b50d") & (summary.initializer == "Pretrained")].iloc[0]
    assert row.diff_vs_xavier == pytest.approx(1.0) and row.ci_low == pytest.approx(1.0)  # +1 BLEU in every seed
    assert summary[summary.initializer == "Xavier"].diff_vs_xavier.isna().all()


def test_bleu_tables_show_paper_bleu_and_carry_sacrebleu_in_the_csv(tmp_path):
    table1(grid(tmp_path), tmp_path)
    csv = pd.read_csv(tmp_path / "t1.csv").set_index(["block", "initializer", "metric"])
    assert csv.loc[("multi30k_glove6b50d", "Pretrained", "bleu"), "mean"] == pytest.approx(32.5)
    assert csv.loc[("multi30k_glove6b50d", "Pretrained", "sacrebleu"), "mean"] == pytest.approx(30.5)
    md = (tmp_path / "t1.md").read_text()
    assert "Multi30k BLEU (σ)" in md and "sacre" not in md.lower() and "32.5 (1.3)" in md


def test_missing_key_names_the_file(tmp_path):
    runs = save(tmp_path, [run("multi30k_glove6b50d", "Xavier", 0)])  # no test_paper_bleu
    with pytest.raises(KeyError, match=r"final\.json has no key 'test_paper_bleu'") as err:
        table1(runs, tmp_path)
    assert runs.final[0] in str(err.value)


def test_mnli_reports_matched_and_mismatched_each_at_its_own_best_epoch(tmp_path):
    summary = table7(grid(tmp_path), tmp_path)
    cell = summary.set_index(["initializer", "metric"])
    assert cell.loc[("Xavier_Pretrained", "accuracy_pct"), "mean_best_epoch"] == pytest.approx(2.0)
    assert cell.loc[("Xavier_Pretrained", "mismatched_accuracy_pct"), "mean_best_epoch"] == pytest.approx(4.5)
    assert "| 2.0 / 4.5 |" in (tmp_path / "t7.md").read_text()


def test_accuracy_must_be_a_fraction(tmp_path):
    runs = save(tmp_path, [run("sst2_glove6b50d", "Xavier", 0, best_valid_acc=82.0)])
    with pytest.raises(ValueError, match="not a fraction"):
        table1(runs, tmp_path)


def test_table3_grid_maps_variants_to_switches(tmp_path):
    runs = [
        run(
            "multi30k_glove6b50d",
            init,
            seed,
            variant,
            best_epoch=5,
            best_valid_loss=2.0 + seed,
            test_paper_bleu=20.0 + i,
            test_sacrebleu=19.0,
        )
        for i, init in enumerate(CONFIG["table3"]["initializers"])
        for variant in CONFIG["table3"]["variants"]
        for seed in range(2)
    ]
    rows = save(tmp_path, runs)
    ranks = {init: i for i, init in enumerate(CONFIG["table3"]["initializers"])}
    write_metrics(  # each side's input ratio grows by epoch: the best epoch's (5) is read
        rows[rows.initializer != "Xavier"],
        5,
        input_ratio_encoder=lambda run, epoch: 0.1 * epoch,
        input_ratio_decoder=lambda run, epoch: ranks[run["initializer"]] * epoch / 5,
    )
    write_metrics(rows[rows.initializer == "Xavier"], 5, valid_loss=lambda run, epoch: 3.0)  # train.mechanism off
    summary = tables.table3(rows, tmp_path / "t3.csv", tmp_path / "t3.md")
    switches = summary.drop_duplicates("variant").set_index("variant")[["embedding_trainable", "pos_encoding"]]
    assert switches.to_dict("index") == {
        "base": {"embedding_trainable": True, "pos_encoding": True},
        "frozen": {"embedding_trainable": False, "pos_encoding": True},
        "nopos": {"embedding_trainable": True, "pos_encoding": False},
        "nopos_frozen": {"embedding_trainable": False, "pos_encoding": False},
    }
    md = (tmp_path / "t3.md").read_text()
    assert md_has_row(md, "GloVe_Xavier", "no", "no", "2.50 (5.0)", "22.0 (0.0)", "2", "-")  # no P: no ratio
    assert md_has_row(md, "GloVe_Xavier", "yes", "yes", "2.50 (5.0)", "22.0 (0.0)", "2", "0.50 / 2.00")
    assert md_has_row(md, "Xavier", "yes", "yes", "2.50 (5.0)", "20.0 (0.0)", "2", "-")  # its metrics have no ratio
    table = md_rows(md)
    assert len(table) == 1 + 12
    assert [r[1:3] for r in table[1:5]] == [["no", "no"], ["yes", "no"], ["no", "yes"], ["yes", "yes"]]
    ratios = summary[summary.metric == "input_ratio_decoder"]
    assert set(ratios.variant) == {"base", "frozen"} and set(ratios.initializer) == {"Pretrained", "Pretrained_Xavier"}
    assert (ratios.n_seeds == 2).all()
    assert "speed option" not in md
    packed = rows.assign(
        speed_options=["packed" if (r.seed, r.variant) == (1, "nopos") else "" for r in rows.itertuples()]
    )
    tables.table3(packed, tmp_path / "t3.csv", tmp_path / "t3.md")  # which seeds trained packed, under the table
    note = (tmp_path / "t3.md").read_text().split("Trained with a speed option")[1]
    assert "GloVe nopos seed 1 (packed)" in note and "Xavier nopos seed 1 (packed)" in note and "seed 0" not in note

    short = rows[(rows.initializer == "Pretrained") & (rows.variant == "base") & (rows.seed == 0)]
    write_metrics(short, 4, input_ratio_decoder=lambda run, epoch: 1.0)  # its record's best epoch is 5
    with pytest.raises(ValueError, match="no row for epoch 5") as error:
        tables.table3(rows, tmp_path / "t3.csv", tmp_path / "t3.md")
    assert short.metrics.iloc[0] in str(error.value)


def test_table5_per_block(tmp_path):
    table = tables.table5(grid(tmp_path), tmp_path / "t5.csv", tmp_path / "t5.md")
    m30k = table.set_index("block").loc["multi30k_glove6b50d"]
    assert (m30k.vocab_encoder, m30k.vocab_decoder, m30k.n_runs) == (100, 80, 8)
    assert m30k.train_minutes_per_epoch == pytest.approx(2.5)
    assert np.isnan(table.set_index("block").loc["sst2_glove6b50d"].vocab_decoder)
    assert md_has_row((tmp_path / "t5.md").read_text(), "100 / 80")
    odd = save(
        tmp_path / "odd", [run("sst2_glove6b50d", "Xavier", 0, batch_size=64), run("sst2_glove6b50d", "Pretrained", 0)]
    )
    with pytest.raises(ValueError, match="disagree on batch_size"):
        tables.table5(odd, tmp_path / "t5.csv", tmp_path / "t5.md")


def test_figure1_writes_png_and_curves(tmp_path):
    runs = grid(tmp_path)
    runs = runs[runs.block == "multi30k_glove6b50d"]  # Figure 1's rows
    for r in runs.itertuples():
        curve = [1.0 + r.seed, 2.0 + r.seed, 3.0]
        pd.DataFrame({"epoch": [1, 2, 3], "valid_paper_bleu": curve}).to_parquet(r.metrics)
    curves = figures.figure1(runs, tmp_path / "fig.png", tmp_path / "fig.csv")
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    xavier = curves[curves.initializer == "Xavier"].set_index("epoch")
    assert xavier.valid_bleu_mean.tolist() == [2.5, 3.5, 3.0] and set(xavier.n_seeds) == {4}
    assert set(pd.read_csv(tmp_path / "fig.csv").label) == {"Xavier", "GloVe"}
    assert xavier.valid_bleu_std.iloc[0] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))  # the band's half-width


def test_figure1_reads_the_metrics_file_each_row_names(tmp_path):
    runs = grid(tmp_path)
    runs = runs[runs.block == "multi30k_glove6b50d"].reset_index(drop=True)
    runs["metrics"] = [str(tmp_path / f"m{i}.parquet") for i in range(len(runs))]  # not beside final.json
    for i, path in enumerate(runs.metrics):
        pd.DataFrame({"epoch": [1], "valid_paper_bleu": [10.0 * i]}).to_parquet(path)
    curves = figures.figure1(runs, tmp_path / "fig.png", tmp_path / "fig.csv")
    expected = {init: np.mean([10.0 * i for i in part.index]) for init, part in runs.groupby("initializer")}
    assert curves.set_index("initializer").valid_bleu_mean.to_dict() == pytest.approx(expected)


VARIANTS = {
    **CONFIG["variants"],
    "rotary": {"pos_encoding": "rotary", "embedding_trainable": True},
    "tied": {"pos_encoding": "sinusoidal", "embedding_trainable": True, "output_embedding": "tied"},
}


def test_table9_crosses_position_encodings_and_compares_with_xavier_under_each(tmp_path):
    config = {
        **CONFIG,
        "variants": VARIANTS,
        "table9": {
            "blocks": ["multi30k_glove6b50d", "sst2_glove6b50d"],
            "initializers": ["Xavier", "Pretrained"],
            "variants": ["base", "rotary"],
        },
    }
    bleu = {
        ("Xavier", "base"): 30.0,
        ("Pretrained", "base"): 27.0,
        ("Xavier", "rotary"): 31.0,
        ("Pretrained", "rotary"): 31.5,
    }
    runs = [
        run("multi30k_glove6b50d", i, s, v, test_paper_bleu=b + s, test_sacrebleu=b)
        for (i, v), b in bleu.items()
        for s in range(3)
    ]
    runs += [run("sst2_glove6b50d", i, s, v, best_valid_acc=0.8) for (i, v) in bleu for s in range(3)]
    summary = tables.crossed_table(save(tmp_path, runs, config), "table9", tmp_path / "t9.csv", tmp_path / "t9.md")
    bleu_rows = summary[summary.metric == "bleu"].set_index(["variant", "initializer"])
    assert bleu_rows.loc[("base", "Pretrained"), "diff_vs_xavier"] == pytest.approx(-3.0)
    assert bleu_rows.loc[("rotary", "Pretrained"), "diff_vs_xavier"] == pytest.approx(0.5)  # same encoding only
    assert set(summary.pos_encoding) == {"sinusoidal", "rotary"}
    md = (tmp_path / "t9.md").read_text()
    assert md_has_row(md, "rotary", "GloVe", "32.5 (1.0)", "+0.5 [+0.5, +0.5] p<0.001")  # +0.5 in every seed
    assert md_has_row(md, "sinusoidal", "Xavier", "31.0 (1.0)", "-")


def test_table11_compares_each_coupling_with_the_untied_model_of_the_same_initializer(tmp_path):
    config = {
        **CONFIG,
        "variants": VARIANTS,
        "table11": {
            "blocks": ["multi30k_glove6b50d"],
            "initializers": ["Xavier", "Pretrained"],
            "variants": ["base", "tied"],
        },
    }
    bleu = {
        ("Xavier", "base"): 30.0,
        ("Pretrained", "base"): 27.0,
        ("Xavier", "tied"): 29.0,
        ("Pretrained", "tied"): 29.0,
    }
    runs = [
        run("multi30k_glove6b50d", i, s, v, test_paper_bleu=b + s * (v == "tied"), test_sacrebleu=b)
        for (i, v), b in bleu.items()
        for s in range(2)
    ]
    summary = tables.crossed_table(save(tmp_path, runs, config), "table11", tmp_path / "t11.csv", tmp_path / "t11.md")
    rows = summary[summary.metric == "bleu"].set_index(["variant", "initializer"])
    assert rows.loc[("tied", "Pretrained"), "diff_vs_base"] == pytest.approx(2.5)  # (29 - 27) and (30 - 27)
    assert rows.loc[("tied", "Xavier"), "diff_vs_base"] == pytest.approx(-0.5)
    assert np.isnan(rows.loc[("base", "Xavier"), "diff_vs_base"]) and "diff_vs_xavier" not in summary
    assert list(rows.loc[("tied", "Xavier"), ["output_embedding"]]) == ["tied"]
    assert md_has_row((tmp_path / "t11.md").read_text(), "untied", "GloVe", "27.0 (0.0)", "-")


def test_recipe_ablation_pairs_each_variant_with_its_cells_first_model_and_draws_the_curves(tmp_path):
    from embinit.reports.recipe import recipe_ablation

    legacy = {"model": {"init": "legacy", "final_norm": False}, "train": {"batching": "bucketed"}}
    frozen = CONFIG["variants"]["frozen"]
    variants = {
        **CONFIG["variants"],
        "frozen_legacy": {**frozen, **legacy},
        "frozen_bucketed": {**frozen, "train": {"batching": "bucketed"}},
        "base_legacy": {**CONFIG["variants"]["base"], **legacy},
    }
    bleu = {"frozen_legacy": 30.0, "frozen_bucketed": 31.0, "frozen": 34.0, "base_legacy": 37.0, "base": 37.5}
    seeds = {"frozen_bucketed": 1}
    runs = [
        run("multi30k_glove6b50d", "Xavier", s, v, best_epoch=20, test_paper_bleu=b + s, best_valid_loss=2.0 - b / 100)
        for v, b in bleu.items()
        for s in range(seeds.get(v, 3))
    ]
    rows = save(tmp_path, runs, {**CONFIG, "variants": variants})
    for r in rows.itertuples():  # valid loss falls 0.1 an epoch from the variant's own start
        start = 4.0 - bleu[r.variant] / 100 + 0.01 * r.seed
        pd.DataFrame({"epoch": [1, 2], "valid_loss": [start, start - 0.1]}).to_parquet(r.metrics)
    out = [tmp_path / f"ra.{x}" for x in ("csv", "md", "png")]
    summary = recipe_ablation(rows, *out).set_index("variant")
    assert list(summary.index) == list(bleu)
    assert summary.loc["frozen", ["model", "batching", "n_seeds"]].tolist() == ["recipe", "random", 3]
    assert summary.loc["frozen_legacy", ["model", "batching"]].tolist() == ["first", "bucketed"]
    assert summary.loc["frozen", "diff_vs_first"] == pytest.approx(4.0)  # paired by seed with frozen_legacy
    assert summary.loc["frozen", "versus_variant"] == "frozen_legacy"
    assert summary.loc["frozen_bucketed", "diff_n_pairs"] == 1  # seed 0 only
    assert (
        summary.loc["base", "diff_vs_first"] == pytest.approx(0.5)
        and summary.loc["base", "versus_variant"] == "base_legacy"
    )
    assert pd.isna(summary.loc["frozen_legacy", "diff_vs_first"])  # the reference itself
    assert summary.loc["frozen", "valid_loss_epoch2"] == pytest.approx(4.0 - 0.34 + 0.01 - 0.1)
    assert "valid_loss_epoch5" not in summary  # no run reached it
    assert md_has_row(out[1].read_text(), "frozen", "no", "sinusoidal", "recipe", "random", "3")
    assert out[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
