"""What every report shares: task names as the paper prints them, "mean (sigma)" cells, Markdown tables, and
writing a table's CSV and Markdown side by side."""

from __future__ import annotations

import os
import re

import pandas as pd

from embinit.io import atomic_path, write_text_atomic

TASK_DISPLAY = {"sst2": "SST2", "mnli": "MNLI", "multi30k": "Multi30k", "iwslt2017": "IWSLT2017"}

# A cell that reads as a number: "82.0 (1.7)", "-0.0318", "+1.0 [...]", "2.0 / 4.5", "(-3.06, 4.37)", "1,424 / 1,631".
_NUMERIC = re.compile(r"[(\[]?[-+−]?\d")


def format_mean_std(mean: float, std: float, digits: int = 1) -> str:
    """'37.3 (0.4)'; just '37.3' when std is undefined (one seed); '-' when there is no value."""
    if pd.isna(mean):
        return "-"
    return f"{mean:.{digits}f}" if pd.isna(std) else f"{mean:.{digits}f} ({std:.{digits}f})"


def _alignment(column: list[str]) -> str:
    """'right' for a column of numbers (blank and '-' cells aside), else 'left'."""
    filled = [c for c in column if c.strip() not in ("", "-")]
    return "right" if filled and all(_NUMERIC.match(c.strip()) for c in filled) else "left"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub pipe table of already formatted cells (kept verbatim): text columns left-aligned, number columns
    right-aligned."""
    frame = pd.DataFrame(rows, columns=header, dtype=object) if rows else pd.DataFrame(columns=header)
    align = [_alignment([str(row[i]) for row in rows]) for i in range(len(header))] if rows else None
    # disable_numparse: "50.0" stays "50.0"
    return frame.to_markdown(index=False, tablefmt="pipe", disable_numparse=True, colalign=align) + "\n"


def write_csv_md(csv_path: str | os.PathLike, md_path: str | os.PathLike, frame: pd.DataFrame, markdown: str) -> None:
    """Both outputs of a table, each written atomically: the numbers as CSV, the paper's layout as Markdown."""
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    write_text_atomic(md_path, markdown)
