"""embinit.reports.comparison: the paper's Markdown tables, their match with our table CSVs, the findings."""

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, STAND_IN, TABLES_CONFIG as CONFIG, md_has_row, save_runs
from embinit.reports import comparison as pc
from embinit.reports import statistics as stats, tables
from embinit.reports.analogy import TRANSFORMS

PAPER = REPO / "resources" / "paper_tables.md"
SST2_GLOVE = {"Xavier": [0.80, 0.82], "Pretrained": [0.70, 0.72], "Pretrained_Xavier": [0.81, 0.83]}
SST2_BERT = {
    "Pretrained": [0.85, 0.86],
    "Xavier": [0.80, 0.80],
    "Pretrained_Xavier": [0.81, 0.81],
    "Pretrained_Shuffled": [0.82, 0.82],
}  # the paper's order: BERT above the other three
# Multi30k BLEU - 30.5 without / with position encoding, in the paper's pattern: raw GloVe is best without P,
# worst with it, and gains least from it.
MULTI30K_BLEU = {"Xavier": (0, 3), "Pretrained": (1, 2), "Pretrained_Xavier": (1, 4)}
ANALOGY = {
    "GloVe": 0.64,
    "GloVe & Scaled": 0.64,
    "GloVe & Pos. Enc.": 0.62,
    "GloVe & Xavier-Std": 0.64,
    "GloVe & Xavier-Std & Scaled": 0.64,
    "GloVe & Xavier-Std & Pos. Enc.": 0.05,
    "GloVe & (Pos. Enc. x σp/σx)": 0.04,
}


def paper_cell(paper, table, row, column):
    hit = paper[(paper.table == table) & (paper.row == row) & (paper.column == column)]
    assert len(hit) == 1, (table, row, column)
    return hit.paper.iloc[0]


def test_parser_reads_the_papers_tables():
    paper = pc.read_paper_tables(PAPER)
    assert not paper.duplicated(["table", "row", "column"]).any()
    assert paper_cell(paper, 1, "GloVe / Xavier", "Multi30k BLEU") == 37.3
    assert paper_cell(paper, 1, "GloVe / Xavier", "Multi30k BLEU sigma") == 0.4
    assert paper_cell(paper, 1, "GloVe / Xavier", "Multi30k BLEU epoch") == 11.7
    assert paper_cell(paper, 1, "GloVe / GloVe", "MNLI mm") == 58.2
    assert paper_cell(paper, 1, "GloVe / GloVe", "MNLI mm sigma") == 1.2
    assert paper_cell(paper, 1, "GloVe / GloVe", "MNLI mm epoch") == 7.5
    assert paper_cell(paper, 7, "Xavier_T5", "MNLI m epoch") == 8.3  # Table 7's plain "epoch" header
    assert [paper_cell(paper, 2, "T5 / T5", f"SST2 {s}") for s in pc.STATS] == [-792, 332, 0.12, 22.6]
    assert [paper_cell(paper, 3, "Xavier", f"no/no {s}") for s in ("loss", "loss epoch", "BLEU", "BLEU sigma")] == [
        1.98,
        18.67,
        28.3,
        0.08,
    ]
    assert [paper_cell(paper, 4, "GloVe & Pos. Enc.", c) for c in ("correct", "applicable", "accuracy %")] == [
        1424,
        1631,
        87.3,
    ]
    assert not (paper.row == "GloVe").loc[paper.table == 4].any()  # "-": no value
    assert paper_cell(paper, 5, "Multi30k / GloVe", "params") == 11e6
    assert paper_cell(paper, 5, "Multi30k / GloVe", "vocab enc") == 7800
    assert paper_cell(paper, 5, "Multi30k / GloVe", "vocab dec") == 5900
    assert paper_cell(paper, 5, "MNLI / GloVe", "vocab enc") == 79000
    assert paper_cell(paper, 5, "IWSLT2017 / mT5", "epochs") == 20
    assert paper_cell(paper, 6, "Xavier", "mean") == 0  # "~0"
    assert paper_cell(paper, 6, "GloVe scaled", "sigma") == 6.39


def test_a_cell_whose_numbers_cannot_be_named_is_an_error(tmp_path):
    path = tmp_path / "t.md"
    path.write_text("## Table 1: x\n| block | init | SST2 acc |\n|---|---|---|\n| GloVe | Xavier | 1 (2) (3) |\n")
    with pytest.raises(ValueError, match=r"Table 1, row 'GloVe / Xavier', column 'SST2 acc'"):
        pc.read_paper_tables(path)


def run(block, init, seed, variant="base", **metrics):
    task = CONFIG["blocks"][block]["task"]
    return {
        "block": block,
        "task": task,
        "kind": "translation" if task == "multi30k" else "classification",
        "initializer": init,
        "seed": seed,
        "variant": variant,
        "best_epoch": 2,
        "params": 1_000_000,
        "epochs": 5,
        "batch_size": 64,
        "train_size": 29_000,
        "train_minutes_per_epoch": 1.5,
        "vocab_sizes": {"encoder": 7853, "decoder": 5893} if task == "multi30k" else {"encoder": 100},
        **metrics,
    }


def write_results(out, sst2_glove=SST2_GLOVE, sst2_bert=SST2_BERT, analogy=ANALOGY):
    """Our Tables 1-6 in their real layout, built by embinit's own writers from fabricated runs and layers."""
    runs = [
        run(block, i, s, best_valid_acc=a)
        for block, accs in (("sst2_glove6b50d", sst2_glove), ("sst2_bert", sst2_bert))
        for i, seeds in accs.items()
        for s, a in enumerate(seeds)
    ]
    for init, bleu in MULTI30K_BLEU.items():
        for variant, switches in CONFIG["variants"].items():
            offset = bleu[switches["pos_encoding"] != "none"]
            runs += [
                run(
                    "multi30k_glove6b50d",
                    init,
                    s,
                    variant,
                    test_paper_bleu=30.0 + s + offset,
                    test_sacrebleu=20.0,
                    best_valid_loss=2.0 - 0.1 * offset,
                )
                for s in range(2)
            ]
    rows = save_runs(out / "runs", runs, CONFIG)
    base = rows[rows.variant == "base"]
    tables.result_table(base, out / "table1.csv", out / "table1.md", "Table 1")
    tables.table3(rows[rows.block == "multi30k_glove6b50d"], out / "table3.csv", out / "table3.md")
    tables.table5(base, out / "table5.csv", out / "table5.md")

    entries = []
    for block, side in (("sst2_glove6b50d", "encoder"), ("multi30k_glove6b50d", "decoder")):
        for k, init in enumerate(["Xavier", "Pretrained", "Pretrained_Xavier"]):
            path = out / "layers" / f"{block}_{init}.npy"
            path.parent.mkdir(exist_ok=True)
            np.save(path, np.random.default_rng(k).normal(0, [0.01, 0.5, 0.01][k], size=(20, 8)))
            entries.append(
                {
                    "block": block,
                    "task": CONFIG["blocks"][block]["task"],
                    "family": "GloVe",
                    "source": "glove6b50d",
                    "side": side,
                    "initializer": init,
                    "path": str(path),
                }
            )
    stats.write_stats_table(entries, out / "table2.csv", out / "table2.md")
    layers = {e["initializer"]: e["path"] for e in entries if e["block"] == "multi30k_glove6b50d"}
    stats.write_table6(layers, "GloVe", STAND_IN, 64, 10000, out / "table6.csv", out / "table6.md")

    table4 = pd.DataFrame({"transformation": list(TRANSFORMS), "accuracy": [analogy[t] for t in TRANSFORMS]})
    table4 = table4.assign(correct=(table4.accuracy * 1631).round().astype(int), applicable=1631, total=19544)
    for i, (column, value) in enumerate(
        {"block": "multi30k_glove6b50d", "side": "decoder", "source": "glove6b50d", "source_display": STAND_IN}.items()
    ):
        table4.insert(i, column, value)
    table4.to_csv(out / "table4.csv", index=False)
    table4.assign(pos_rows=64).to_csv(out / "table4_sensitivity.csv", index=False)  # not a paper table: ignored
    return out


def csvs(out):
    """Every table*.csv of a results directory, as the rule lists the tables it gives."""
    return sorted(out.glob("table*.csv"))


def compare(out, csv_name="paper_comparison.csv", md_name="paper_comparison.md"):
    return pc.paper_comparison(csvs(out), PAPER, out / csv_name, out / md_name)


def cell(frame, table, row, column):
    hit = frame[(frame.table == table) & (frame.row == row) & (frame.column == column)]
    assert len(hit) == 1, (table, row, column)
    return hit.iloc[0]


def test_our_tables_match_the_papers_rows_and_columns(tmp_path):
    out = write_results(tmp_path)
    result = compare(out)
    csv = pd.read_csv(out / "paper_comparison.csv", keep_default_na=False, na_values=[""])
    assert list(csv.columns) == pc.COLUMNS == list(result.columns)
    assert csv.paper.notna().all() and csv.ours.notna().all()

    xavier = cell(csv, 1, "GloVe / Xavier", "SST2 acc")
    assert (xavier.paper, xavier.ours, xavier.n_seeds) == (82.7, pytest.approx(81.0), 2)
    assert xavier.source == "glove6b50d (stand-in for GloVe 840B)"
    assert cell(csv, 1, "GloVe / GloVe", "SST2 acc sigma").ours == pytest.approx(np.std([70, 72], ddof=1))
    assert pd.isna(cell(csv, 1, "BERT / BERT", "SST2 acc").source)  # BERT is the paper's own source
    bleu = cell(csv, 1, "GloVe / GloVe_Xavier", "Multi30k BLEU")
    assert (bleu.paper, bleu.ours) == (38.7, pytest.approx(34.5))  # paper BLEU, not sacreBLEU
    assert bleu.source == "encoder=none (Xavier); decoder=glove6b50d (stand-in for GloVe 840B)"
    assert not csv.column.str.contains("sacre", case=False).any()

    assert (
        cell(csv, 2, "GloVe / GloVe", "Multi30k sigma").source == "glove6b50d (stand-in for GloVe 840B), decoder layer"
    )  # display from the other CSVs; not the encoder
    frozen = cell(csv, 3, "GloVe_Xavier", "no/no BLEU")
    assert (frozen.paper, frozen.ours, frozen.n_seeds) == (31.2, pytest.approx(31.5), 2)
    assert cell(csv, 3, "Xavier", "yes/no loss epoch").ours == 2
    assert cell(csv, 4, "GloVe & Xavier-std & Pos. Enc.", "accuracy %").ours == pytest.approx(5.0)  # paper's spelling
    assert cell(csv, 4, "GloVe & (Pos. Enc. x sigma_p / sigma_x)", "correct").ours == round(0.04 * 1631)
    assert cell(csv, 5, "Multi30k / GloVe", "vocab dec").ours == 5893
    assert cell(csv, 5, "SST2 / BERT", "min/epoch").ours == 1.5
    glove = cell(csv, 6, "GloVe scaled", "sigma")  # our row "GloVe scaled", its source in the CSV's column
    assert glove.source == "glove6b50d (stand-in for GloVe 840B)" and glove.paper == 6.39
    assert cell(csv, 6, "Pretrained_Xavier", "max").source == "glove6b50d (stand-in for GloVe 840B)"
    assert pd.isna(cell(csv, 6, "Xavier scaled", "sigma").source) and pd.isna(
        cell(csv, 6, "Pos. Encoding", "max").source
    )
    assert set(csv.table) == {1, 2, 3, 4, 5, 6}

    md = (out / "paper_comparison.md").read_text()
    assert all(f"Table {n}: not among our tables; skipped." in md for n in (7, 8))
    assert "Table 6: not among" not in md
    assert f"{len(csv)} cells with both values" in md and md_has_row(
        md, "GloVe / Xavier", "SST2 acc", "82.7", "81", "2"
    )
    assert f"The paper's numbers ({PAPER.name})" in md and str(PAPER.parent) not in md  # no machine's path
    assert "ours (table1.csv, table2.csv, table3.csv, table4.csv, table5.csv, table6.csv)" in md
    assert str(out) not in md


def test_reads_exactly_the_tables_it_is_given(tmp_path):
    out = write_results(tmp_path)
    given = [out / "table1.csv", out / "table4_sensitivity.csv", out / "table5.csv"]
    table = pc.paper_comparison(given, PAPER, tmp_path / "c.csv", tmp_path / "c.md")
    assert set(table.table) == {1, 5}
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "table1.csv").write_bytes((out / "table1.csv").read_bytes())
    with pytest.raises(ValueError, match="Table 1 is given twice"):
        pc.paper_comparison([out / "table1.csv", other / "table1.csv"], PAPER, tmp_path / "c.csv", tmp_path / "c.md")


def test_table5_with_the_older_minutes_column(tmp_path):
    out = write_results(tmp_path)
    old = pd.read_csv(out / "table5.csv").rename(columns={"train_minutes_per_epoch": "minutes_per_epoch"})
    old.to_csv(out / "table5.csv", index=False)
    assert cell(compare(out), 5, "Multi30k / GloVe", "min/epoch").ours == 1.5


def verdicts(out) -> dict[str, str]:
    paper, (ours, _) = pc.read_paper_tables(PAPER), pc.our_cells(csvs(out))
    checks = pc.findings(paper, ours)
    return {f: pc.verdict([c for c in checks if c.finding == f]) for f in pc.FINDINGS}


def test_the_findings_follow_our_numbers(tmp_path):
    held = verdicts(write_results(tmp_path / "a"))
    assert held == {
        "F1": "holds (4 of 4 cells hold)",
        "F2": "holds (6 of 6 cells hold)",
        "F3": "holds (1 of 1 cells hold)",
    }

    flipped = verdicts(
        write_results(
            tmp_path / "b",
            sst2_glove={**SST2_GLOVE, "Pretrained": [0.90, 0.92]},
            sst2_bert={**SST2_BERT, "Pretrained": [0.70, 0.70]},
        )
    )
    assert flipped["F1"].startswith("does not hold") and flipped["F3"] == "does not hold (0 of 1 cells hold)"

    out = write_results(tmp_path / "c", analogy={**ANALOGY, "GloVe & Pos. Enc.": 0.05})
    assert verdicts(out)["F2"] == "does not hold (5 of 6 cells hold)"
    failed = [c.cell for c in pc.findings(pc.read_paper_tables(PAPER), pc.our_cells(csvs(out))[0]) if c.holds is False]
    assert failed == ["Table 4 GloVe & Pos. Enc."]


def test_a_finding_without_our_cells_is_not_measured(tmp_path):
    out = write_results(tmp_path)
    for n in (1, 2, 3, 4):
        (out / f"table{n}.csv").unlink()
    assert set(verdicts(out).values()) == {"not measured here"}
    compare(out)
    assert "**F1: not measured here.**" in (out / "paper_comparison.md").read_text()


def test_committed_offline_results(tmp_path):
    results = REPO / "results" / "offline-cpu"
    table = pc.paper_comparison(csvs(results), PAPER, tmp_path / "c.csv", tmp_path / "c.md")
    assert len(table) >= 20 and table.paper.notna().all() and table.ours.notna().all()
    assert table.source.str.contains("stand-in").any()
    assert {1, 2, 3, 4}.issubset(set(table.table))
    assert "## What holds" in (tmp_path / "c.md").read_text()


def test_table6_of_an_older_version_carries_the_source_in_its_labels(tmp_path):
    """Before rows were labelled by family, Table 6 printed the source's display in the label; both read alike."""
    out = write_results(tmp_path)
    new = pd.read_csv(out / "table6.csv")
    old = new.drop(columns="source_display").assign(layer=new.layer.str.replace("GloVe", STAND_IN, regex=False))
    old.to_csv(out / "table6.csv", index=False)
    assert old.layer.iloc[4] == f"{STAND_IN}_Xavier"
    before = compare(out, "c.csv", "c.md")
    new.to_csv(out / "table6.csv", index=False)
    after = compare(out, "c.csv", "c.md")
    assert (before.table == 6).sum() == 7 * 4
    pd.testing.assert_frame_equal(before, after)
