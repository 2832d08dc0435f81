"""Every run in one table (output `runs`): one row per run record, what the run is beside what its final.json and
metrics.parquet say, as CSV, Parquet and a self-contained HTML page whose table sorts and filters in the browser."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from embinit.io import atomic_path, write_text_atomic

# What the run is (its run-sheet row), then what it ran with and scored (its final.json), in this order
DESCRIBED = [
    "block",
    "task",
    "kind",
    "sources",
    "initializer",
    "label",
    "initializer_entry",
    "initializer_params",
    "variant",
    "pos_encoding",
    "embedding_trainable",
    "output_embedding",
    "model_init",
    "final_norm",
    "batching",
    "speed_options",  # a speed option in the run's identity (config `train`, a block's `speed_runs`): "packed"
    "seed",
]
RECORDED = ["embedding_dim", "lr", "batch_size", "epochs", "best_epoch", "best_valid_loss"]
# the scores a record may hold: a translation run's BLEU, a classification run's accuracy (MNLI: its test split too)
SCORES = [
    "test_paper_bleu",
    "test_sacrebleu",
    "valid_paper_bleu",
    "valid_sacrebleu",
    "best_valid_acc",
    "best_test_acc",
    "best_test_epoch",
]
SIZES = [
    "params",
    "train_size",
    "train_minutes_per_epoch",
    "valid_minutes_per_epoch",
    "device",
    "stack",  # runs trained together in one stacked model (embinit.training.stacked); absent before it existed
    "training_code",
]
# a run's settings its record holds where the config holds them too: the record's are what it ran with (records from
# before a setting existed leave it to the config's)
SETTINGS = ["pos_encoding", "embedding_trainable", "output_embedding", "model_init", "final_norm", "batching"]


def run_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run of `rows` (an every-run output's run-sheet rows): its description, settings, scores and sizes
    from its final.json, the epochs its metrics.parquet holds, the outputs that show it and its directory."""
    table = []
    for row in rows.to_dict("records"):
        record = json.loads(Path(row["final"]).read_text(encoding="utf-8"))
        epochs_run = len(pd.read_parquet(row["metrics"], columns=["epoch"]))
        settings = {key: record[key] for key in SETTINGS if key in record}
        table.append(
            {key: row[key] for key in DESCRIBED}
            | settings
            | {key: record.get(key) for key in RECORDED + SCORES + SIZES}
            | {"epochs_run": epochs_run, "shown_in": row["shown_in"], "path": row["run"]}
        )
    table = pd.DataFrame(table).dropna(axis=1, how="all")  # a score no run of this set has (MNLI's test accuracy)
    for column in table.columns:  # a setting that is a bool or a side's name: text
        if pd.api.types.is_object_dtype(table[column]) and table[column].dropna().map(type).nunique() > 1:
            table[column] = table[column].astype("string")
    return table


def write_runs(table: pd.DataFrame, csv_path, parquet_path, html_path, title: str) -> None:
    """The run table as CSV, Parquet and an HTML page that sorts and filters it."""
    with atomic_path(csv_path) as tmp:
        table.to_csv(tmp, index=False)
    with atomic_path(parquet_path) as tmp:
        table.to_parquet(tmp, index=False)
    write_text_atomic(html_path, html_page(table, title))


def _cell(value) -> str:
    """A table cell: floats to 4 significant digits, the full value kept in `data-v` for sorting."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "<td></td>"
    if isinstance(value, (float, np.floating)):
        return f'<td data-v="{float(value)!r}">{value:.4g}</td>'
    return f"<td>{html.escape(str(value))}</td>"


# Sorting (a click on a column's name; again reverses it) and filtering (a box per column: every row whose cell holds
# each box's text, case-insensitive) in the page itself, no library: the page opens offline
SCRIPT = """
const table = document.getElementById("runs");
const body = table.tBodies[0];
const rows = Array.from(body.rows);
const boxes = Array.from(table.querySelectorAll("thead input"));
const count = document.getElementById("count");
let order = {column: -1, direction: 1};
function key(row) {
  const cell = row.cells[order.column];
  const text = cell.dataset.v ?? cell.textContent;
  return text !== "" && isFinite(text) ? Number(text) : text.toLowerCase();
}
function blank(row) {
  const cell = row.cells[order.column];
  return (cell.dataset.v ?? cell.textContent) === "";
}
function compare(a, b) {
  const [x, y] = [key(a), key(b)];
  if (typeof x !== typeof y) return typeof x === "number" ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}
function render() {
  const wanted = boxes.map(box => box.value.trim().toLowerCase());
  const shown = rows.filter(row => wanted.every((w, i) => !w || row.cells[i].textContent.toLowerCase().includes(w)));
  // a blank cell (a score the run has none of) sorts last both ways
  if (order.column >= 0) shown.sort((a, b) => blank(a) - blank(b) || order.direction * compare(a, b));
  body.replaceChildren(...shown);
  count.textContent = `${shown.length} of ${rows.length} runs`;
}
table.querySelectorAll("thead th button").forEach((button, column) => button.addEventListener("click", () => {
  order = {column, direction: order.column === column ? -order.direction : 1};
  table.querySelectorAll("thead th").forEach((th, i) =>
    th.setAttribute("aria-sort", i === column ? (order.direction > 0 ? "ascending" : "descending") : "none"));
  render();
}));
boxes.forEach(box => box.addEventListener("input", render));
render();
"""

STYLE = """
body { font-family: sans-serif; font-size: 13px; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 2px 5px; white-space: nowrap; }
th button { font: inherit; font-weight: bold; border: none; background: none; cursor: pointer; }
th[aria-sort=ascending] button::after { content: " \\25B2"; }
th[aria-sort=descending] button::after { content: " \\25BC"; }
th input { width: 7em; }
tbody tr:nth-child(even) { background: #f4f4f4; }
"""


def html_page(table: pd.DataFrame, title: str) -> str:
    """A self-contained page (no external script or style) with the table, a filter box under each column's name."""
    head = "".join(
        f'<th aria-sort="none"><button type="button">{html.escape(c)}</button><br>'
        f'<input type="search" aria-label="filter {html.escape(c)}"></th>'
        for c in table.columns
    )
    body = "\n".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in table.itertuples(index=False))
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
        f"<style>{STYLE}</style>\n</head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
        "<p>A click on a column's name sorts by it (again: reversed); the box under it keeps the rows whose cell holds "
        'its text. <span id="count"></span></p>\n'
        f'<table id="runs">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n'
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )
