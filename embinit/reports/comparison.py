"""The paper's own numbers beside ours, cell by cell, and its three findings checked on our runs.

The paper's numbers are tidy rows `table, row, column, value` (resources/paper_tables.csv) named as our tables name
them: a cell's row joins a table CSV's LAYOUT row keys with " / ", its column the column keys and the statistic with
" " (Table 1: row "GloVe / GloVe_Xavier", column "sst2 accuracy_pct mean"). One melt puts any of our tables into
those names and one merge puts the paper's number beside ours.

The findings are CHECKS, one entry per claim: a sum of cells with coefficients (a difference, or a difference of
differences) claimed above or below zero. On the result tables (1, 3, 7) the sum is taken per seed, paired, and the
verdict is three-valued: holds or contradicted when its 95% t-interval excludes zero on the claimed or the other
side, undecided when it contains zero or has fewer than 2 seeds. On layer statistics and analogy counts (Tables 2,
4), which are not seeded, the sum is exact and the claim holds or is contradicted.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Collection, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from embinit.reports.format import markdown_table, write_csv_md
from embinit.layers.initializers import display_name
from embinit.reports import field, sweeps
from embinit.reports.tables import (
    SIZES,
    paired_difference,
    per_seed,
    result_metrics,
    t_interval,
    table3_cell,
    table3_metrics,
    verdict_of,
)


class Layout(NamedTuple):
    """How a table CSV's cells are named: its row keys, its column keys and the statistics it reports."""

    rows: list[str]
    columns: list[str]
    statistics: list[str]


RESULT_STATS = ["mean", "std", "mean_best_epoch"]
LAYER_STATS = ["min", "max", "mean", "sigma"]
LAYOUT = {
    1: Layout(["family", "label"], ["task", "metric"], RESULT_STATS),
    2: Layout(["family", "label"], ["task"], LAYER_STATS),
    3: Layout(["label"], ["cell", "metric"], RESULT_STATS),  # the paper's cell a variant fills (tables.table3_cell)
    4: Layout(["transformation"], [], ["correct", "applicable", "accuracy"]),
    5: Layout(["task", "family"], [], [*SIZES, "train_minutes_per_epoch"]),
    6: Layout(["layer"], [], LAYER_STATS),
    7: Layout(["label"], ["task", "metric"], RESULT_STATS),
    8: Layout(["label"], ["task"], LAYER_STATS),
}
COLUMNS = ["table", "row", "column", "paper", "ours", "n_seeds", "ci_low", "ci_high", "vs_paper", "source"]
FINDINGS = {
    "F1": "Raw pre-trained GloVe (large σ) starts worse than Xavier, and GloVe_Xavier (standardized) recovers it",
    "F2": "Position encoding: next to the scaled GloVe layer adding P barely changes analogy, at Xavier's scale it "
    "destroys it; in Table 3, GloVe beats Xavier without P and gains less than Xavier and GloVe_Xavier from adding it",
    "F3": "BERT / T5 family: the pre-trained row against Xavier, its _Xavier and _Shuffled controls as in the paper",
}


class Check(NamedTuple):
    """A claim that the sum of `terms` ((table, row, column) -> coefficient) is above (sign +1) or below (-1) zero,
    or (0) on the side the paper's numbers put it. In a template, {col} stands for each of the paper's columns
    that fit (a result column "sst2 accuracy_pct", a layer column "sst2"), {family} for each non-GloVe family."""

    finding: str
    claim: str
    terms: dict
    sign: int


def _gain(trained: str, name: str) -> dict:
    """BLEU that adding P gains `name` (Table 3, embedding trainable or frozen)."""
    with_p, without = ("base", "nopos") if trained == "trainable" else ("frozen", "nopos_frozen")
    return {(3, name, f"{with_p} bleu"): 1, (3, name, f"{without} bleu"): -1}


def _minus(a: dict, b: dict) -> dict:
    return {**a, **{cell: -c for cell, c in b.items()}}


CHECKS = [
    Check("F1", "GloVe's layer σ > Xavier's", {(2, "GloVe / GloVe", "{col} sigma"): 1, (2, "GloVe / Xavier", "{col} sigma"): -1}, 1),
    Check("F1", "GloVe < Xavier", {(1, "GloVe / GloVe", "{col}"): 1, (1, "GloVe / Xavier", "{col}"): -1}, -1),
    Check("F1", "GloVe_Xavier > GloVe", {(1, "GloVe / GloVe_Xavier", "{col}"): 1, (1, "GloVe / GloVe", "{col}"): -1}, 1),
    Check("F2", "adding P keeps ≥ 90% of GloVe's analogy accuracy",
          {(4, "GloVe & Pos. Enc.", "accuracy"): 1, (4, "GloVe", "accuracy"): -0.9}, 1),
    Check("F2", "adding P keeps < 50% of the Xavier-standardized layer's analogy accuracy",
          {(4, "GloVe & Xavier-Std & Pos. Enc.", "accuracy"): 1, (4, "GloVe & Xavier-Std", "accuracy"): -0.5}, -1),
    *(Check("F2", f"without P, embedding {t}: GloVe > Xavier",
            {(3, "GloVe", f"{v} bleu"): 1, (3, "Xavier", f"{v} bleu"): -1}, 1)
      for t, v in (("frozen", "nopos_frozen"), ("trainable", "nopos"))),
    *(Check("F2", f"embedding {t}: adding P gains GloVe less than {other}", _minus(_gain(t, "GloVe"), _gain(t, other)), -1)
      for t in ("frozen", "trainable") for other in ("Xavier", "GloVe_Xavier")),
    *(Check("F3", f"{{family}} vs {other} as in the paper",
            {(1, "{family} / {family}", "{col}"): 1, (1, f"{{family}} / {other}", "{col}"): -1}, 0)
      for other in ("Xavier", "{family}_Xavier", "{family}_Shuffled")),
]  # fmt: skip


# --- the cells ------------------------------------------------------------------------------------------------


def _joined(frame: pd.DataFrame, keys: list[str], sep: str) -> pd.Series:
    return frame[keys].astype(str).agg(sep.join, axis=1) if keys else pd.Series("", index=frame.index)


def table_cells(table: int, frame: pd.DataFrame) -> pd.DataFrame:
    """Our table's CSV as cells named as the paper's are, with the seeds behind each and the source used; a
    mean over seeds also carries its 95% t-interval (ci_low, ci_high)."""
    layout = LAYOUT[table]
    frame = frame.assign(
        row=_joined(frame, layout.rows, " / "),
        prefix=_joined(frame, layout.columns, " "),
        source=frame.get("source_display", frame.get("source", "")),
        n_seeds=frame.get("n_seeds", pd.NA),
    )
    statistics = [s for s in layout.statistics if s in frame]
    long = frame.melt(["row", "prefix", "source", "n_seeds"], statistics, "stat", "ours")
    long["column"] = (long.prefix + " " + long.stat).str.strip()
    if "std" in frame:  # a mean over seeds: its cell, and only that one, carries the interval
        low, high = t_interval(frame["mean"], frame["std"], frame.n_seeds)  # NaN with one seed (no std)
        interval = frame.assign(stat="mean", ci_low=low, ci_high=high)
        long = long.merge(interval[["row", "prefix", "stat", "ci_low", "ci_high"]], how="left")  # on row, prefix, stat
    return long.assign(table=table).reindex(columns=[c for c in COLUMNS if c not in ("paper", "vs_paper")])


def compare(paper: pd.DataFrame, ours: pd.DataFrame) -> pd.DataFrame:
    """Every cell with both a paper and our value, in the paper's order; vs_paper says whether our mean's 95%
    interval lies above or below the paper's number, or is undecided (it contains it, or there is one seed)."""
    cells = paper.rename(columns={"value": "paper"}).merge(ours, on=["table", "row", "column"])
    seeded = cells.n_seeds.notna() & cells.column.str.endswith(" mean")
    side = np.select(
        [cells.ci_low > cells.paper, cells.ci_high < cells.paper], ["ours higher", "ours lower"], "undecided"
    )
    cells["vs_paper"] = np.where(seeded, side, "")
    return cells[COLUMNS].astype({"n_seeds": "Int64"})


def seeded_cells(runs: pd.DataFrame) -> pd.DataFrame:
    """Per seed, the value of every result-table cell its runs fill: `runs` are the run sheet's rows of the seeded
    outputs (column `output`); those of an output that is none of the paper's tables (a table of yours) fill none."""
    parts = []
    for output, rows in runs.groupby("output", sort=False):
        numbered = re.fullmatch(r"table(\d+)", output)
        table = int(numbered[1]) if numbered else None
        if table not in LAYOUT:
            continue
        long = per_seed(rows.drop(columns="output"), table3_metrics if table == 3 else result_metrics)
        if table == 3:
            long["cell"] = [table3_cell(*r) for r in long[["variant", "embedding_trainable", "pos_encoding"]].values]
        layout = LAYOUT[table]
        named = {"row": _joined(long, layout.rows, " / "), "column": _joined(long, layout.columns, " ")}
        parts.append(pd.DataFrame({"table": table, **named, "seed": long.seed, "value": long.value}))
    return pd.concat(parts) if parts else pd.DataFrame(columns=["table", "row", "column", "seed", "value"])


# --- the findings ---------------------------------------------------------------------------------------------


def expand(check: Check, paper: pd.DataFrame, seeded: Collection[int]) -> list[Check]:
    """A template's checks, one per value of its placeholders among the paper's rows and columns."""
    table, _, column = next(iter(check.terms))
    families = [None]
    if "{family}" in check.claim:
        families = paper.row[paper.table == 1].str.split(" / ").str[0]
        families = families[families != "GloVe"].unique()
    columns = [None]
    if "{col}" in column:
        pattern = re.escape(column).replace(re.escape("{col}"), "(.+)") + (" mean" if table in seeded else "")
        columns = paper.column[paper.table == table].str.extract(f"^{pattern}$")[0].dropna().unique()
    checks = []
    for fill in ({"family": family, "col": col} for family in families for col in columns):
        terms = {(t, r.format(**fill), c.format(**fill)): k for (t, r, c), k in check.terms.items()}
        checks.append(check._replace(claim=check.claim.format(**fill), terms=terms))
    return checks


def seeds_to_decide(mean: float, sd: float, power: float = 0.8, alpha: float = 0.05, limit: int = 10_000):
    """Seeds a paired t-test needs to find a difference of `mean` at paired σ `sd` with this power, two-sided at
    this level (an estimate: it takes the observed values as the truth); None above `limit`."""
    if not mean or not sd:
        return None
    effect = abs(mean) / sd
    n = max(2, math.ceil(((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / effect) ** 2))
    while n <= limit:
        critical = stats.t.ppf(1 - alpha / 2, n - 1)
        nc = effect * math.sqrt(n)
        if stats.nct.sf(critical, n - 1, nc) + stats.nct.cdf(-critical, n - 1, nc) >= power:
            return n
        n += 1
    return None


def evaluate(check: Check, values: pd.DataFrame, ours: pd.DataFrame, paper: pd.DataFrame, seeded) -> dict:
    """The evidence and verdict of one expanded check: our difference (paired by seed on result tables), its 95%
    t-interval, p, seeds and the seeds an undecided one would need; the paper's difference beside it."""
    table, _, column = next(iter(check.terms))
    key = ["table", "row", "column"]
    paper_cells = paper.set_index(key).value
    paper_terms = {(t, r, c + (" mean" if t in seeded else "")): k for (t, r, c), k in check.terms.items()}
    paper_diff = sum(k * paper_cells.get(cell, np.nan) for cell, k in paper_terms.items())
    sign = check.sign or np.sign(paper_diff)
    out = {"finding": check.finding, "claim": check.claim, "table": table, "column": column,
           "paper_diff": paper_diff, "diff": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "n_seeds": 0,
           "seeds_needed": None, "verdict": "not measured here"}  # fmt: skip
    if table in seeded:
        wide = values.set_index(key + ["seed"]).value.unstack(key)
        if not set(check.terms) <= set(wide.columns) or not sign:
            return out
        d = (wide[list(check.terms)] * list(check.terms.values())).sum(axis=1, min_count=len(check.terms)).dropna()
        paired = paired_difference(d)
        low, high = paired["ci_low"], paired["ci_high"]  # NaN below 2 seeds: undecided
        verdict = verdict_of(low, high, sign)
        out.update(diff=paired["diff"], ci_low=low, ci_high=high, p=paired["p_paired_t"])
        out.update(n_seeds=len(d), verdict=verdict)
        if verdict == "undecided" and len(d) >= 2:
            out["seeds_needed"] = seeds_to_decide(d.mean(), d.std(ddof=1))
        return out
    values = ours.set_index(key).ours
    if set(check.terms) <= set(values.index) and sign:
        diff = sum(k * values[cell] for cell, k in check.terms.items())
        out.update(diff=diff, verdict="holds" if sign * diff > 0 else "contradicted")
    return out


# --- beyond the paper -----------------------------------------------------------------------------------------

# The tables beyond the paper that judge claims of their own: table number -> its claims, each its CSV column prefix
# and its wording, a template over the CSV row's columns (`label(init)`: the initializer's name in the row's family)
CLAIMED = {12: sweeps.table12_claims, 13: sweeps.table13_claims, 14: field.table14_claims}


def claims(table: int, frame: pd.DataFrame) -> pd.DataFrame:
    """The claims a table of CLAIMED (`frame`, its CSV) judges, a row each: claim, Δ with its 95% interval and pairs,
    verdict."""
    tests = CLAIMED[table](frame, lambda init: display_name(init, frame.family.iloc[0]))
    rows = [
        {"table": table, "claim": claim.format(**r), "diff": r[p], "ci_low": r[f"{p}_ci_low"],
         "ci_high": r[f"{p}_ci_high"], "n_pairs": r[f"{p}_n_pairs"], "verdict": r[f"{p}_verdict"]}
        for p, claim in tests
        for r in frame.to_dict("records")
        if r[f"{p}_n_pairs"]
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["table", "claim", "diff", "ci_low", "ci_high", "n_pairs", "verdict"])


# --- outputs --------------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    return f"{x:+.2f}" if abs(x) >= 0.1 or abs(x) < 1e-9 else f"{x:+.2g}"  # float noise reads as 0.00


def _evidence(r) -> str:
    """'Δ -5.00 [-6.60, -3.40], p < 0.001, 5 seeds': our evidence, then the paper's difference and whether our
    interval holds it."""
    if r.n_seeds == 0:
        ours = f"Δ {_num(r.diff)} (exact: not seeded)"
    elif pd.isna(r.ci_low):
        ours = f"Δ {_num(r.diff)}, {r.n_seeds} seed{'s' * (r.n_seeds > 1)}: no paired σ, no interval"
    else:
        p = "p < 0.001" if r.p < 0.001 else f"p = {r.p:.3f}"
        ours = f"Δ {_num(r.diff)} [{_num(r.ci_low)}, {_num(r.ci_high)}], {p}, {r.n_seeds} seeds"
        if r.verdict == "undecided":
            ours += (
                f"; an estimated {int(r.seeds_needed)} seeds would decide it (80% power, 5% level, at this Δ and "
                "paired σ)"
                if pd.notna(r.seeds_needed)
                else "; more than 10,000 seeds would be needed at this Δ and paired σ"
            )
    paper = "-" if pd.isna(r.paper_diff) else f"Δ {_num(r.paper_diff)}"
    if pd.notna(r.paper_diff) and pd.notna(r.ci_low):  # an undecided sign can still rule out the paper's size
        paper += ", inside our interval" if r.ci_low <= r.paper_diff <= r.ci_high else ", outside our interval"
    return f"Ours: {ours}. Paper: {paper}"


def _findings_markdown(checks: pd.DataFrame) -> str:
    lines = [
        "## What holds\n",
        "Each claim is a difference of cells (Δ). On Tables 1, 3 and 7 it is paired by seed and judged by its 95% "
        "t-interval: **holds** or **contradicted** when the interval excludes zero on the claimed or the other "
        "side, **undecided** when it contains zero or there are fewer than 2 seeds. On Tables 2 and 4 (not "
        "seeded) Δ is exact. The paper's Δ, from its means, is shown beside, with whether our interval holds it.\n",
    ]
    for finding, statement in FINDINGS.items():
        part = checks[checks.finding == finding]
        counts = part.verdict.value_counts()
        tally = ", ".join(f"{counts.get(v, 0)} {v}" for v in ("holds", "contradicted", "undecided"))
        tally = tally.replace("holds", "hold" if counts.get("holds", 0) != 1 else "holds")
        lines.append(f"- **{finding}: {tally}** ({counts.get('not measured here', 0)} not measured here). {statement}.")
        for r in part[part.verdict != "not measured here"].itertuples():
            lines.append(f"  - Table {r.table} {r.column}, {r.claim}: **{r.verdict}**. {_evidence(r)}.")
    return "\n".join(lines) + "\n"


def _cells_markdown(paper: pd.DataFrame, cells: pd.DataFrame) -> str:
    parts = []
    for n, part in cells.groupby("table"):
        rows = [[r.row, r.column, f"{r.paper:.4g}", f"{r.ours:.4g}", "" if pd.isna(r.n_seeds) else str(r.n_seeds),
                 r.vs_paper] for r in part.itertuples()]  # fmt: skip
        sources = "; ".join(f"`{s}`" for s in dict.fromkeys(part.source.dropna()) if s)
        parts.append(
            f"## Table {n}\n\n{len(part)} of the paper's {int((paper.table == n).sum())} numbers have ours beside "
            "them.\n\n" + markdown_table(["Row", "Column", "Paper", "Ours", "Seeds", "vs paper"], rows)
            + (f"\nOur sources: {sources}\n" if sources else "")
        )  # fmt: skip
    return "\n".join(parts)


def _beyond_markdown(parts: dict[int, pd.DataFrame]) -> str:
    """Beyond the paper: each claim a table of CLAIMED judges (Finding 1 along a scale or a learning rate, the
    field's initializers against Xavier and the paper's proposal), as a row."""
    if not parts:
        return ""
    *others, last = map(str, parts)
    tables = f"Tables {', '.join(others)} and {last}" if others else f"Table {last}"
    rows = [[f"{r.table}", r.claim, f"{r.diff:+.2f}" + ("" if pd.isna(r.ci_low) else f" [{r.ci_low:+.2f}, {r.ci_high:+.2f}]"),
             str(r.n_pairs), f"**{r.verdict}**"] for part in parts.values() for r in part.itertuples()]  # fmt: skip
    return (
        f"\n## Beyond the paper\n\nClaims tested where the paper did not: the claims of {tables}, each a difference of "
        "accuracy (%) or BLEU paired by seed with its 95% t-interval and verdict as above.\n\n"
        + markdown_table(["Table", "Claim", "Δ [95% CI]", "Seeds", "Verdict"], rows)
    )


def judged(table_csvs, runs: pd.DataFrame, paper_csv, seeded: Collection[int]):
    """The paper's cells, our tables' cells and the findings' checks judged on the runs of the `seeded` tables
    (Tables 1, 3 and 7: their cells are means over seeds, so their checks are paired by seed; `runs`: their run
    sheet rows, column `output`), with our tables by number."""
    paper = pd.read_csv(paper_csv)
    found = {}
    for path in map(Path, table_csvs):
        if m := re.fullmatch(r"table(\d+)\.csv", path.name):
            if int(m[1]) in found:
                raise ValueError(f"Table {m[1]} is given twice: {found[int(m[1])]} and {path}")
            found[int(m[1])] = path
    cells = [table_cells(n, pd.read_csv(p)) for n, p in sorted(found.items()) if n in LAYOUT]
    ours = pd.concat(cells) if cells else pd.DataFrame(columns=[c for c in COLUMNS if c not in ("paper", "vs_paper")])
    values = seeded_cells(runs)
    checks = pd.DataFrame(
        [evaluate(c, values, ours, paper, seeded) for check in CHECKS for c in expand(check, paper, seeded)]
    )
    return paper, ours, checks, found


def paper_comparison(
    table_csvs, runs: pd.DataFrame, paper_csv, csv_path, md_path, seeded: Collection[int]
) -> pd.DataFrame:
    """paper_comparison.csv / .md: our tables (`table<N>.csv` among `table_csvs`) beside the paper's numbers, and
    the findings judged on the runs of the seeded tables (`judged`)."""
    paper, ours, checks, found = judged(table_csvs, runs, paper_csv, seeded)
    cells = compare(paper, ours)
    names = ", ".join(p.name for _, p in sorted(found.items())) or "none"
    md = (
        f"# Paper vs ours\n\nThe paper's numbers ({Path(paper_csv).name}) beside ours ({names}): {len(cells)} cells "
        "with both values, named as our tables' CSVs name them. Seeds: the seeds behind our value; vs paper: where "
        "the paper's mean lies against the 95% t-interval of ours.\n\n"
        + _findings_markdown(checks)
        + "\n"
        + _cells_markdown(paper, cells)
        + _beyond_markdown({n: claims(n, pd.read_csv(p)) for n, p in sorted(found.items()) if n in CLAIMED})
    )
    write_csv_md(csv_path, md_path, cells, md)
    return checks


FINDING_COLUMNS = ["finding", "claim", "table", "column", "paper_diff", "diff", "ci_low", "ci_high", "p", "n_seeds",
                   "verdict"]  # fmt: skip


def findings(table_csvs, runs: pd.DataFrame, paper_csv, csv_path, md_path, seeded: Collection[int]) -> pd.DataFrame:
    """findings.csv / .md: each of the paper's claims measured here, a row each: the paper's Δ, ours with its 95%
    interval and seeds, the verdict (the claims paper_comparison.md words; the front page's table reads this)."""
    checks = judged(table_csvs, runs, paper_csv, seeded)[2]
    rows = checks[checks.verdict != "not measured here"][FINDING_COLUMNS].astype({"n_seeds": int})
    md = (
        "# Findings\n\nThe paper's claims measured here: the paper's Δ (from its means), ours (paired by seed on "
        "Tables 1, 3 and 7, with the 95% t-interval; exact on Tables 2 and 4, 0 seeds) and the verdict.\n\n"
        + rows.to_markdown(index=False, floatfmt=".2f")
        + "\n"
    )
    write_csv_md(csv_path, md_path, rows, md)
    return rows
