"""Value statistics of embedding layers: Tables 2, 6 and 8 (SPEC section 5).

Each table is written twice: a CSV with numeric columns, and a Markdown file in the paper's layout.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from embinit.layers.initializers import display_name, mean_std
from embinit.layers.position_table import sinusoidal_table
from embinit.reports.format import TASK_DISPLAY, format_mean_std, markdown_table, write_csv_md


def matrix_stats(x: np.ndarray) -> dict[str, float]:
    """min, max, mean and sample std (sigma) over all entries."""
    mean, sigma = mean_std(x)
    return {"min": float(np.min(x)), "max": float(np.max(x)), "mean": mean, "sigma": sigma}


def write_stats_table(entries: list[dict], out_csv: str, out_md: str) -> pd.DataFrame:
    """Table 2 (or Table 8 for the Xavier_Pretrained layers): a row per family and initializer, a column per task.

    `entries` are dicts with block, task, family, source (None: the side has none), initializer and the layer's path.
    Rows are labelled with the block's family ("GloVe", "BERT", "T5"), as the paper's tables group GloVe / German
    GloVe, BERT / mBERT and T5 / mT5 in one row (a side without a source: `display_name`'s "(no source: Xavier)"). Markdown cells: "Range (min, max)" and "Mean (sigma)" per task, in the entries' order.
    """
    layers = pd.DataFrame(entries)
    labels = [display_name(r.initializer, r.family, pd.notna(r.source)) for r in layers.itertuples()]
    stats = pd.DataFrame([matrix_stats(np.load(path, mmap_mode="r")) for path in layers.path])
    table = pd.concat([layers.drop(columns="path").assign(label=labels), stats], axis=1)
    cells = table.assign(
        range=[f"({low:.4f}, {high:.4f})" for low, high in zip(table["min"], table["max"])],
        mean_sigma=[format_mean_std(mean, sigma, 4) for mean, sigma in zip(table["mean"], table["sigma"])],
    )
    names, tasks = {"range": "Range (min, max)", "mean_sigma": "Mean (sigma)"}, pd.unique(table.task)
    wide = cells.pivot_table(
        index=["family", "label"], columns="task", values=list(names), aggfunc="first", sort=False
    ).reindex(columns=[(cell, task) for task in tasks for cell in names])
    header = ["Family", "Initialization", *(f"{TASK_DISPLAY.get(task, task)} {names[cell]}" for cell, task in wide)]
    rows = wide.fillna("-").reset_index().to_numpy().tolist()
    write_csv_md(out_csv, out_md, table, markdown_table(header, rows))
    return table


def write_table6(layers: dict, family: str, source_display: str, pos_rows: int, pos_base: float, out_csv, out_md):
    """Table 6: each layer (initializer -> .npy path) as is and scaled by sqrt(D), then P (its first pos_rows rows).

    Shows the scale mismatch the paper discusses: the model multiplies embeddings by sqrt(D) before adding P.
    P's mean depends on its length; the paper's 0.131 at D = 300 matches about 5,000 rows (config
    `table6.pos_rows`), not the model's max_len. Rows are labelled with the block's `family`, as in Tables 2 and
    8; the source actually used (`source_display`, e.g. a stand-in) is in the pre-trained rows and the note.
    """
    rows = []
    for initializer, path in layers.items():
        x = np.load(path)
        label, dim = display_name(initializer, family), x.shape[1]
        source = source_display if "Pretrained" in initializer else None
        for suffix, y in (("", x), (" scaled", x.astype(np.float64) * math.sqrt(dim))):
            rows.append({"layer": label + suffix, **matrix_stats(y), "source_display": source})
    rows.append({"layer": "Position encoding", **matrix_stats(sinusoidal_table(pos_rows, dim, pos_base))})
    table = pd.DataFrame(rows, columns=["layer", "min", "max", "mean", "sigma", "source_display"])
    md_rows = [
        [r["layer"], f"{r['min']:.4f}", f"{r['max']:.4f}", format_mean_std(r["mean"], r["sigma"], 4)] for r in rows
    ]
    note = (
        f"\nSource of the {family} rows: {source_display}. Position encoding: the first {pos_rows:,} rows of the "
        f"sinusoidal table (base {pos_base:g}).\n"
    )
    write_csv_md(out_csv, out_md, table, markdown_table(["Layer", "Min", "Max", "Mean (sigma)"], md_rows) + note)
    return table
