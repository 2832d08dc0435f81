"""The front page's numbers are the records': each result set's findings.csv recomputes from its run records and
tables, the README's findings table is the one rule `summary` builds from them, and the figure rebuilds byte for byte."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, result_set_config
from embinit.workflow.outputs import OUTPUTS, seeded_tables
from embinit.reports.comparison import findings
from embinit.reports.summary import figure, findings_table
from embinit.workflow.runsheet import recorded_runs, run_sheet

RESULTS = REPO / "results"
RUN_FILES = {"final": "/final.json", "metrics": "/metrics.parquet", "run": ""}


def summary_sets() -> dict[str, Path]:
    return {scale: REPO / folder for scale, folder in result_set_config("first-run")["summary"]["sets"].items()}


@pytest.mark.parametrize("result_set", ["first-run", "offline-cpu", "paper-scale-cpu"])
def test_committed_findings_recompute_from_the_records(result_set, tmp_path, monkeypatch):
    """findings.csv is what the paper comparison judges today on the set's committed runs and tables."""
    monkeypatch.chdir(REPO)
    config = result_set_config(result_set)
    res = config["results_dir"]
    paths = {name: f"{res}/{{block}}/{{init}}/seed{{seed}}/{{variant}}{tail}" for name, tail in RUN_FILES.items()}
    sheet = run_sheet(config, paths, recorded_runs(config, res))
    rows = sheet[sheet.output.isin(OUTPUTS["findings"].sheet_outputs(config))].drop(
        columns=[c for c in ("run",) if c in sheet]
    )
    tables = [f"{res}/{n}.csv" for n in config["outputs"] if (REPO / res / f"{n}.csv").exists()]
    got = findings(tables, rows, config["paper_comparison"]["paper_tables"], tmp_path / "f.csv", tmp_path / "f.md",
                   seeded_tables())  # fmt: skip
    assert (tmp_path / "f.csv").read_text() == (RESULTS / result_set / "findings.csv").read_text()
    assert len(got) > 0


def test_the_readmes_findings_table_is_the_records():
    """README.md holds, between its findings markers, the table rule `summary` builds (results/summary.md), and
    that is the table the committed findings.csv files give today: a number changed by hand fails here."""
    table = findings_table(summary_sets())
    assert (RESULTS / "summary.md").read_text() == table
    readme = (REPO / "README.md").read_text()
    start, end = readme.index("<!-- findings: results/summary.md -->\n"), readme.index("<!-- /findings -->")
    assert readme[start:end].split("\n", 1)[1] == table
    assert readme.count("\n", 0, end) < 40, "the findings table ends within the README's first 40 lines"


def test_the_summary_figure_rebuilds_from_the_records(tmp_path):
    """results/summary.svg is the figure the committed records draw (its ids fixed), and the PNG is drawn beside it."""
    sets = summary_sets()
    figure(sets, result_set_config("first-run")["summary"]["finding1"], tmp_path / "s.png", tmp_path / "s.svg")
    assert (tmp_path / "s.svg").read_bytes() == (RESULTS / "summary.svg").read_bytes()
    assert (tmp_path / "s.png").stat().st_size > 10_000 and (RESULTS / "summary.png").exists()


def test_a_findings_row_per_claim_and_scale():
    """Every measured claim of every set is a row of the table, under its set's column."""
    sets = summary_sets()
    table = findings_table(sets)
    for folder in sets.values():
        for r in pd.read_csv(folder / "findings.csv").itertuples():
            assert f"| {r.finding} | {r.claim} (T{r.table}:" in table
