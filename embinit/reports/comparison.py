"""The paper's own numbers beside ours, cell by cell, and whether its three findings show in our numbers.

The paper's numbers come from a Markdown copy of its tables (resources/paper_tables.md; "-" = no value). Every
number in a cell becomes a long row `table, row, column, paper`; compound cells split into named columns, e.g.
"60.4 (1.4) / 60.2 (1.8)" under "MNLI m / mm" gives "MNLI m", "MNLI m sigma", "MNLI mm", "MNLI mm sigma".
Our table CSVs are put into the same names (rows by family and display label, columns by task), so the two
join on (table, row, column). The findings are predicates on those cells, evaluated on our numbers (and, for
reference, on the paper's): their outcome is computed, never fixed here.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from embinit.reports.format import TASK_DISPLAY, format_mean_std, markdown_table, write_csv_md

COLUMNS = ["table", "row", "column", "paper", "ours", "n_seeds", "source"]
KEY_HEADERS = {"block", "init", "task", "source", "transformation", "layer"}  # a paper row's name, not numbers
NUMBER = re.compile(r"~?-?\d+(?:\.\d+)?[kM]?")
# Headers whose cells the generic "value (sigma) / value (sigma)" naming does not fit: their numbers in order.
HEADER_NAMES = {
    "min, max": ["min", "max"],
    "mean (sigma)": ["mean", "sigma"],
    "correct / applicable (%)": ["correct", "applicable", "accuracy %"],
    "vocab": ["vocab enc", "vocab dec"],
}
TRANSLATION = ("multi30k", "iwslt2017")
STATS = ("min", "max", "mean", "sigma")
# F2's reading of Table 4: "little effect" keeps at least this share of the accuracy without P, "destroys"
# keeps less than DESTROYED of it. The paper states no threshold; these are ours, shown with every check.
LITTLE_EFFECT = 0.9
DESTROYED = 0.5
T3_ROWS = ("Xavier", "GloVe", "GloVe_Xavier")  # Table 3's initializations, by their paper names
FINDINGS = {
    "F1": "Raw pre-trained GloVe (large σ) starts worse than Xavier, and GloVe_Xavier (standardized) recovers it",
    "F2": "Position encoding: next to the scaled GloVe layer adding P barely changes analogy, at Xavier's scale it "
    "destroys it; in Table 3, GloVe beats Xavier without P and gains less than Xavier and GloVe_Xavier "
    "from adding it",
    "F3": "BERT / T5 family: the pre-trained row ranks against Xavier, _Xavier and _Shuffled as in the paper",
}


# --- the paper's tables ---------------------------------------------------------------------------------------


def _number(text: str) -> float:
    """'11M' -> 11e6, '7.8k' -> 7800, '~0' -> 0."""
    text = text.lstrip("~")
    return float(text.rstrip("kM")) * {"k": 1e3, "M": 1e6}.get(text[-1], 1)


def _slash_names(header: str) -> list[str]:
    """'MNLI m / mm' -> ['MNLI m', 'MNLI mm']: each later part replaces the first part's last word."""
    first, *rest = header.split(" / ")
    prefix = first.rsplit(" ", 1)[0] + " " if " " in first else ""
    return [first] + [prefix + part for part in rest]


def _cell_names(header: str, bases: list[str], cell: str, count: int) -> list[str]:
    """Names of the `count` numbers of one cell, in order; `bases` are the column's value names."""
    if ";" in cell:  # "-0.02,0.02; 0 (0.01)": range; mean (sigma)
        return [f"{header} {s}" for s in STATS]
    if "), " in cell:  # "1.98 (18.67), 28.3 (0.08)": lowest loss (epoch), BLEU (sigma)
        return [f"{header} {s}" for s in ("loss", "loss epoch", "BLEU", "BLEU sigma")]
    if header in HEADER_NAMES:
        return HEADER_NAMES[header][:count]
    names = []
    for base, part in zip(bases, cell.split(" / ")):  # "60.4 (1.4) / 60.2 (1.8)" or "3.5 / 3"
        names += [base, f"{base} sigma"][: len(NUMBER.findall(part))]
    return names


def _paper_row(table: int, header: list[str], cells: list[str]) -> list[tuple]:
    row = " / ".join(c for h, c in zip(header, cells) if h in KEY_HEADERS)
    out, bases = [], []
    for head, cell in zip(header, cells):
        if head in KEY_HEADERS:
            continue
        # an "epoch" column belongs to the value column before it ("MNLI m / mm" -> "MNLI m epoch", ...)
        bases = [f"{b} epoch" for b in bases] if head.split(" ")[0] == "epoch" else _slash_names(head)
        numbers = NUMBER.findall(cell)
        names = _cell_names(head, bases, cell, len(numbers))
        if len(names) != len(numbers):
            raise ValueError(f"Table {table}, row {row!r}, column {head!r}: cannot name the numbers of {cell!r}")
        out += [(table, row, name, _number(n)) for name, n in zip(names, numbers)]
    return out


def read_paper_tables(path) -> pd.DataFrame:
    """Every number of the "## Table N" sections' Markdown tables as rows `table, row, column, paper`."""
    rows, table, header = [], None, None
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            match = re.match(r"## Table (\d+)", line)
            table, header = (int(match.group(1)) if match else None), None
        elif line.startswith("|") and table is not None and not set(line.strip()) <= set("|-: "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            else:
                rows += _paper_row(table, header, cells)
    return pd.DataFrame(rows, columns=["table", "row", "column", "paper"])


# --- our tables in the paper's names --------------------------------------------------------------------------


def paper_source(family: str, task: str) -> str:
    """The paper's source of a family in a task: mBERT / mT5 for translation (its Table 1 note), else the family."""
    return f"m{family}" if task in TRANSLATION and family in ("BERT", "T5") else family


def _sides(sources: str, displays: str) -> list[tuple[str, str, str]]:
    """'encoder=none; decoder=glove6b50d' and its display column -> [(side, name, display), ...]."""
    return [(*s.split("=", 1), d.split("=", 1)[1]) for s, d in zip(sources.split("; "), displays.split("; "))]


def _label(name: str, display: str) -> str:
    """'glove6b50d (stand-in for GloVe 840B)': our source's name with its display's note."""
    if name == "none" or display == name:
        return display
    note = re.fullmatch(r".*\((.+)\)", display)
    return f"{name} ({note.group(1) if note else display})"


def _source(sides: list[tuple[str, str, str]], paper: str) -> str:
    """Our sources of a row where they differ from the paper's source `paper`; '' where they do not."""
    if all(display == paper for _, _, display in sides):
        return ""
    if len(sides) == 1:
        return _label(*sides[0][1:])
    return "; ".join(f"{side}={_label(name, display)}" for side, name, display in sides)


def _known_displays(csvs: dict[int, pd.DataFrame]) -> dict[str, str]:
    """Source name -> display, from the CSVs that carry both (Tables 2, 6 and 8 name only one of them)."""
    displays = {}
    for frame in csvs.values():
        if {"sources", "source_display"} <= set(frame.columns):
            for sources, shown in zip(frame.sources, frame.source_display):
                displays.update((name, display) for _, name, display in _sides(sources, shown))
        elif {"source", "source_display"} <= set(frame.columns):
            displays.update(zip(frame.source, frame.source_display))
    return displays


def _result_base(task: str, metric: str) -> str | None:
    """Table 1's value column of a task and metric ('SST2 acc', 'MNLI mm', 'Multi30k BLEU'); None for sacreBLEU."""
    short = {"accuracy_pct": "m" if task == "mnli" else "acc", "mismatched_accuracy_pct": "mm", "bleu": "BLEU"}
    return f"{TASK_DISPLAY.get(task, task)} {short[metric]}" if metric in short else None


def _results(frame: pd.DataFrame, table: int, displays) -> list[dict]:
    """Tables 1 and 7: mean, sigma and mean best epoch per task column."""
    out = []
    for r in frame.itertuples():
        base = _result_base(r.task, r.metric)
        if base is not None:
            row = f"{r.family} / {r.label}" if table == 1 else r.label
            source = _source(_sides(r.sources, r.source_display), paper_source(r.family, r.task))
            out += _cells(
                table,
                row,
                {base: r.mean, f"{base} sigma": r.std, f"{base} epoch": r.mean_best_epoch},
                r.n_seeds,
                source,
            )
    return out


def _layer_stats(frame: pd.DataFrame, table: int, displays) -> list[dict]:
    """Tables 2 and 8: range, mean and sigma of a block's layer per task column."""
    out = []
    for r in frame.itertuples():
        row = f"{r.family} / {r.label}" if table == 2 else r.label
        source = _source([(r.side, r.source, displays.get(r.source, r.source))], paper_source(r.family, r.task))
        if r.side != "encoder":  # the paper's are encoder layers
            source = ", ".join(filter(None, [source, f"{r.side} layer"]))
        task = TASK_DISPLAY.get(r.task, r.task)
        out += _cells(table, row, {f"{task} {s}": getattr(r, s) for s in STATS}, None, source)
    return out


def _table3(frame: pd.DataFrame, table: int, displays) -> list[dict]:
    """Table 3: columns 'trainable/pos. enc.' ('no/yes'), each lowest loss (epoch) and BLEU (sigma)."""
    out = []
    for r in frame.itertuples():
        column = f"{'yes' if r.embedding_trainable else 'no'}/{'yes' if r.pos_encoding else 'no'}"
        values = (
            {f"{column} loss": r.mean, f"{column} loss epoch": r.mean_best_epoch}
            if r.metric == "best_valid_loss"
            else {f"{column} BLEU": r.mean, f"{column} BLEU sigma": r.std}
            if r.metric == "bleu"
            else {}
        )
        out += _cells(
            table,
            r.label,
            values,
            r.n_seeds,
            _source(_sides(r.sources, r.source_display), paper_source(r.family, r.task)),
        )
    return out


def _table4(frame: pd.DataFrame, table: int, displays) -> list[dict]:
    out = []
    for r in frame.itertuples():
        values = {"correct": r.correct, "applicable": r.applicable, "accuracy %": 100 * r.accuracy}
        out += _cells(table, r.transformation, values, None, _source([(r.side, r.source, r.source_display)], "GloVe"))
    return out


def _table5(frame: pd.DataFrame, table: int, displays) -> list[dict]:
    """Table 5; minutes per epoch under its current name or the older `minutes_per_epoch`."""
    minutes = "train_minutes_per_epoch" if "train_minutes_per_epoch" in frame.columns else "minutes_per_epoch"
    out = []
    for r in frame.to_dict("records"):
        paper = paper_source(r["family"], r["task"])
        values = {
            "params": r["params"],
            "epochs": r["epochs"],
            "batch": r["batch_size"],
            "vocab enc": r["vocab_encoder"],
            "vocab dec": r["vocab_decoder"],
            "train": r["train_size"],
            "min/epoch": r[minutes],
        }
        out += _cells(
            table,
            f"{TASK_DISPLAY.get(r['task'], r['task'])} / {paper}",
            values,
            None,
            _source(_sides(r["sources"], r["source_display"]), paper),
        )
    return out


def _table6(frame: pd.DataFrame, table: int, displays) -> list[dict]:
    """Table 6: our layers are labelled by family ('GloVe', 'GloVe_Xavier scaled') with the source in the column
    `source_display`; the paper's rows are GloVe, Pretrained_Xavier, Xavier and Pos. Encoding, each also 'scaled'.

    A CSV of an older version has no `source_display` and carries the display in the label instead
    ('GloVe-6B-50d (...)_Xavier scaled').
    """
    names = {display: name for name, display in displays.items()}
    labelled = "source_display" not in frame.columns
    out = []
    for r in frame.to_dict("records"):
        base, scaled = r["layer"].removesuffix(" scaled"), r["layer"].endswith(" scaled")
        source = ""
        if base == "Position encoding":
            row = "Pos. Encoding"
        elif base == "Xavier":
            row = base
        else:
            row = "Pretrained_Xavier" if base.endswith("_Xavier") else "GloVe"
            display = base.removesuffix("_Xavier") if labelled else r["source_display"]
            if not pd.isna(display):
                source = _source([("", names.get(display, display), display)], "GloVe")
        out += _cells(table, row + (" scaled" if scaled else ""), {s: r[s] for s in STATS}, None, source)
    return out


def _cells(table: int, row: str, values: dict, n_seeds, source: str) -> list[dict]:
    return [
        {"table": table, "row": row, "column": column, "ours": value, "n_seeds": n_seeds, "source": source}
        for column, value in values.items()
        if not pd.isna(value)
    ]


OURS = {1: _results, 2: _layer_stats, 3: _table3, 4: _table4, 5: _table5, 6: _table6, 7: _results, 8: _layer_stats}


TABLE_CSV = re.compile(r"table(\d+)\.csv")


def _numbered(table_csvs) -> dict[int, Path]:
    """{N: path} of the `table<N>.csv` among `table_csvs`; other files (table4_sensitivity.csv, ...) are ignored."""
    if isinstance(table_csvs, (str, os.PathLike)):
        table_csvs = [table_csvs]
    paths: dict[int, Path] = {}
    for path in map(Path, table_csvs):
        match = TABLE_CSV.fullmatch(path.name)
        if match is None or int(match.group(1)) not in OURS:
            continue
        n = int(match.group(1))
        if n in paths:
            raise ValueError(f"Table {n} is given twice: {paths[n]} and {path}")
        paths[n] = path
    return paths


def our_cells(table_csvs) -> tuple[pd.DataFrame, list[str]]:
    """Our tables (the `table<N>.csv` among `table_csvs`) in the paper's (table, row, column) names, and a note
    per table of the paper's that is not among them."""
    csvs = {n: pd.read_csv(p) for n, p in sorted(_numbered(table_csvs).items())}
    notes = [f"Table {n}: not among our tables; skipped." for n in OURS if n not in csvs]
    displays = _known_displays(csvs)
    rows = [cell for n, frame in csvs.items() for cell in OURS[n](frame, n, displays)]
    return pd.DataFrame(rows, columns=["table", "row", "column", "ours", "n_seeds", "source"]), notes


def _key(row: str) -> str:
    """Rows match despite spelling: 'GloVe & Xavier-std & Pos. Enc.' = 'GloVe & Xavier-Std & Pos. Enc.',
    'sigma_p / sigma_x' = 'σp/σx'."""
    return re.sub(r"[^a-z0-9&/]", "", row.lower().replace("σ", "sigma"))


def compare(paper: pd.DataFrame, ours: pd.DataFrame) -> pd.DataFrame:
    """Every cell with both a paper and our value, in the paper's order, named as the paper names it."""
    merged = paper.assign(key=paper.row.map(_key)).merge(
        ours.assign(key=ours.row.map(_key)).drop(columns="row"), on=["table", "key", "column"]
    )
    return merged[COLUMNS].astype({"n_seeds": "Int64"})


# --- the findings ----------------------------------------------------------------------------------------------


class Check(NamedTuple):
    """One cell of a finding: our values and verdict (None = not measured here), and the paper's."""

    finding: str
    cell: str
    claim: str
    ours: str
    holds: bool | None
    paper: str
    paper_holds: bool | None


Cells = dict[tuple[int, str, str], float]


def _lookup(frame: pd.DataFrame, value: str) -> Cells:
    return {(t, _key(r), c): v for t, r, c, v in zip(frame.table, frame.row, frame.column, frame[value])}


def _values(cells: Cells, wanted: dict[str, tuple[int, str, str]]) -> dict[str, float] | None:
    """{label: value} of the wanted cells, or None when any of them has no value."""
    values = {label: cells.get((t, _key(r), c), np.nan) for label, (t, r, c) in wanted.items()}
    return None if any(pd.isna(v) for v in values.values()) else values


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _show(cells: Cells, wanted: dict, values: dict | None) -> str:
    """'Xavier 81.7 (0.5), GloVe 74.8 (2.0)': each value with its sigma over seeds where the table has one."""
    if values is None:
        return "-"
    shown = []
    for label, (t, r, c) in wanted.items():
        sigma = cells.get((t, _key(r), f"{c} sigma"), np.nan)
        value = values[label]
        digits = 1 if abs(value) >= 10 else 2  # small BLEUs stay distinguishable
        shown.append(f"{label} {_fmt(value) if pd.isna(sigma) else format_mean_std(value, sigma, digits)}")
    return ", ".join(shown)


def _check(
    finding: str, cell: str, claim: str, wanted: dict, predicate: Callable[[dict], bool], ours: Cells, paper: Cells
) -> Check:
    """Evaluate `predicate` on our values and on the paper's (None where a value is missing)."""
    o, p = _values(ours, wanted), _values(paper, wanted)
    return Check(
        finding,
        cell,
        claim,
        _show(ours, wanted, o),
        None if o is None else bool(predicate(o)),
        _show(paper, wanted, p),
        None if p is None else bool(predicate(p)),
    )


def _value_columns(paper: pd.DataFrame, table: int) -> list[str]:
    """A result table's value columns ('SST2 acc', 'MNLI m', ...), without their sigma and epoch."""
    columns = paper.column[paper.table == table]
    return list(dict.fromkeys(c for c in columns if not c.endswith((" sigma", " epoch"))))


def _f1(paper: pd.DataFrame, ours: Cells, paper_cells: Cells) -> list[Check]:
    checks = []
    for column in [c for c in dict.fromkeys(paper.column[paper.table == 2]) if c.endswith(" sigma")]:
        wanted = {"Xavier σ": (2, "GloVe / Xavier", column), "GloVe σ": (2, "GloVe / GloVe", column)}
        checks.append(
            _check(
                "F1",
                f"Table 2 {column.removesuffix(' sigma')}",
                "GloVe's layer σ > Xavier's",
                wanted,
                lambda v: v["GloVe σ"] > v["Xavier σ"],
                ours,
                paper_cells,
            )
        )
    for column in _value_columns(paper, 1):
        wanted = {name: (1, f"GloVe / {name}", column) for name in ("Xavier", "GloVe", "GloVe_Xavier")}
        checks.append(
            _check(
                "F1",
                f"Table 1 {column}",
                "GloVe < Xavier and GloVe_Xavier > GloVe",
                wanted,
                lambda v: v["GloVe"] < v["Xavier"] and v["GloVe_Xavier"] > v["GloVe"],
                ours,
                paper_cells,
            )
        )
    return checks


def _f2(ours: Cells, paper_cells: Cells) -> list[Check]:
    acc = "accuracy %"
    checks = [
        _check(
            "F2",
            "Table 4 GloVe & Pos. Enc.",
            f"keeps ≥ {LITTLE_EFFECT:.0%} of GloVe's accuracy",
            {"GloVe": (4, "GloVe", acc), "GloVe & Pos. Enc.": (4, "GloVe & Pos. Enc.", acc)},
            lambda v: v["GloVe & Pos. Enc."] >= LITTLE_EFFECT * v["GloVe"],
            ours,
            paper_cells,
        ),
        _check(
            "F2",
            "Table 4 GloVe & Xavier-Std & Pos. Enc.",
            f"keeps < {DESTROYED:.0%} of GloVe & Xavier-Std's",
            {
                "GloVe & Xavier-Std": (4, "GloVe & Xavier-Std", acc),
                "GloVe & Xavier-Std & Pos. Enc.": (4, "GloVe & Xavier-Std & Pos. Enc.", acc),
            },
            lambda v: v["GloVe & Xavier-Std & Pos. Enc."] < DESTROYED * v["GloVe & Xavier-Std"],
            ours,
            paper_cells,
        ),
    ]
    for trainable in ("no", "yes"):
        checks.append(
            _check(
                "F2",
                f"Table 3 {trainable}/no BLEU",
                "without P, GloVe > Xavier",
                {name: (3, name, f"{trainable}/no BLEU") for name in ("Xavier", "GloVe")},
                lambda v: v["GloVe"] > v["Xavier"],
                ours,
                paper_cells,
            )
        )
        wanted = {f"{name} {pos}": (3, name, f"{trainable}/{pos} BLEU") for name in T3_ROWS for pos in ("no", "yes")}
        checks.append(
            _check(
                "F2",
                f"Table 3 {trainable}/no → {trainable}/yes BLEU",
                "adding P gains GloVe less than Xavier and GloVe_Xavier",
                wanted,
                _gains_less,
                ours,
                paper_cells,
            )
        )
    return checks


def _gains_less(v: dict[str, float]) -> bool:
    """BLEU gained by adding P ('<row> yes' - '<row> no'): smaller for GloVe than for Xavier and GloVe_Xavier."""
    gain = {name: v[f"{name} yes"] - v[f"{name} no"] for name in T3_ROWS}
    return gain["GloVe"] < gain["Xavier"] and gain["GloVe"] < gain["GloVe_Xavier"]


def _signs(values: dict[str, float], pretrained: str) -> list[int]:
    """Sign of pre-trained minus each other row; equal values (to rounding) count as 0."""
    return [
        0 if math.isclose(values[pretrained], v, rel_tol=1e-9) else int(np.sign(values[pretrained] - v))
        for label, v in values.items()
        if label != pretrained
    ]


def _ranking(values: dict[str, float] | None) -> str:
    """'BERT 83.3 > BERT_Shuffled 81.8 > ...', '=' between equal values."""
    if values is None:
        return "-"
    ranked = sorted(values.items(), key=lambda item: -item[1])
    text = f"{ranked[0][0]} {_fmt(ranked[0][1])}"
    for (_, before), (label, value) in zip(ranked, ranked[1:]):
        text += f" {'=' if math.isclose(before, value, rel_tol=1e-9) else '>'} {label} {_fmt(value)}"
    return text


def _f3(paper: pd.DataFrame, ours: Cells, paper_cells: Cells) -> list[Check]:
    families = dict.fromkeys(r.split(" / ")[0] for r in paper.row[paper.table == 1])
    checks = []
    for family in [f for f in families if f != "GloVe"]:
        for column in _value_columns(paper, 1):
            wanted = {
                name: (1, f"{family} / {name}", column)
                for name in (family, "Xavier", f"{family}_Xavier", f"{family}_Shuffled")
            }
            o, p = _values(ours, wanted), _values(paper_cells, wanted)
            holds = None if o is None or p is None else _signs(o, family) == _signs(p, family)
            checks.append(
                Check(
                    "F3",
                    f"Table 1 {column}, {family} rows",
                    f"{family} vs Xavier, {family}_Xavier, {family}_Shuffled as in the paper",
                    _ranking(o),
                    holds,
                    _ranking(p),
                    None,
                )
            )
    return checks


def findings(paper: pd.DataFrame, ours: pd.DataFrame) -> list[Check]:
    """The checks of F1-F3 on our cells (`our_cells`), with the paper's cells (`read_paper_tables`) beside."""
    our_lookup, paper_lookup = _lookup(ours, "ours"), _lookup(paper, "paper")
    return _f1(paper, our_lookup, paper_lookup) + _f2(our_lookup, paper_lookup) + _f3(paper, our_lookup, paper_lookup)


def verdict(checks: list[Check]) -> str:
    """'holds' when every cell measured here holds, 'does not hold' when one does not, else 'not measured here'."""
    measured = [c.holds for c in checks if c.holds is not None]
    if not measured:
        return "not measured here"
    held = sum(measured)
    return f"{'holds' if held == len(measured) else 'does not hold'} ({held} of {len(measured)} cells hold)"


# --- outputs ---------------------------------------------------------------------------------------------------


def _holds(value: bool | None) -> str:
    return {True: "holds", False: "does not hold", None: "not measured here"}[value]


def _findings_markdown(checks: list[Check]) -> str:
    lines = [
        "## What holds\n",
        "Each finding is checked cell by cell on our numbers; the paper's numbers are shown beside (with "
        "the same check on them where the paper has every value). Values: mean (σ over seeds) where "
        "there are seeds.\n",
    ]
    for finding, statement in FINDINGS.items():
        part = [c for c in checks if c.finding == finding]
        lines.append(f"- **{finding}: {verdict(part)}.** {statement}.")
        for c in part:
            if c.holds is not None:
                on_paper = "" if c.paper_holds is None else f" ({_holds(c.paper_holds)})"
                lines.append(
                    f"  - {c.cell}, {c.claim}: **{_holds(c.holds)}**. Ours: {c.ours}. Paper: {c.paper}{on_paper}."
                )
        missing = [c.cell for c in part if c.holds is None]
        if missing:
            lines.append(f"  - Not measured here: {'; '.join(missing)}.")
    return "\n".join(lines) + "\n"


def _tables_markdown(paper: pd.DataFrame, table: pd.DataFrame) -> str:
    parts = []
    for n, part in table.groupby("table", sort=True):
        rows = [
            [r.row, r.column, _fmt(r.paper), _fmt(r.ours), "" if pd.isna(r.n_seeds) else str(r.n_seeds)]
            for r in part.itertuples()
        ]
        sources = [s for s in dict.fromkeys(part.source) if s]
        note = (
            "\nOur sources where they differ from the paper's: " + "; ".join(f"`{s}`" for s in sources) + "\n"
            if sources
            else ""
        )
        parts.append(
            f"## Table {n}\n\n{len(part)} of the paper's {int((paper.table == n).sum())} numbers have "
            f"ours beside them.\n\n" + markdown_table(["Row", "Column", "Paper", "Ours", "Seeds"], rows) + note
        )
    return "\n".join(parts)


def paper_comparison(table_csvs, paper_tables, csv_path, md_path) -> pd.DataFrame:
    """paper_comparison.csv / .md: our tables (the `table<N>.csv` among `table_csvs`) beside the paper's numbers."""
    paper = read_paper_tables(paper_tables)
    ours, notes = our_cells(table_csvs)
    table = compare(paper, ours)
    names = ", ".join(p.name for _, p in sorted(_numbered(table_csvs).items())) or "none"
    md = (
        f"# Paper vs ours\n\nThe paper's numbers ({Path(paper_tables).name}) beside ours ({names}): {len(table)} "
        "cells with both values. Column names: `sigma` = σ over seeds (Tables 1, 3, 7) or of the layer's entries "
        "(Tables 2, 6, 8); `epoch` = mean best epoch; Table 3's `no/yes` = embedding trainable / position "
        "encoding. Seeds: the seeds behind our value.\n\n"
        + "".join(f"- {note}\n" for note in notes)
        + ("\n" if notes else "")
        + _findings_markdown(findings(paper, ours))
        + "\n"
        + _tables_markdown(paper, table)
    )
    write_csv_md(csv_path, md_path, table, md)
    return table
