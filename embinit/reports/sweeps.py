"""Beyond the paper, Finding 1 along a sweep: Table 12 (the layer's scale apart from its content: each base layer
times k) and Table 13 (Finding 1's checks at each learning rate), each with its figure.

Each receives exactly its runs (the run sheet's rows, embinit.workflow.runsheet), reads their accuracy from final.json and
judges a difference paired by seed by its 95% t-interval, as Table 1's Δ and the paper comparison do.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from embinit.io import atomic_path
from embinit.layers.initializers import display_name
from embinit.reports.format import markdown_table, write_csv_md
from embinit.reports.tables import field, paired_difference, per_seed, read_final, t_interval, verdict_of

# Table 13's checks of Finding 1 (a wide distribution hurts, standardizing recovers): (minuend, subtrahend, sign of
# the claimed difference)
FINDING1 = [("Pretrained", "Xavier", -1), ("Pretrained_Xavier", "Pretrained", +1)]


def _accuracy(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run's best validation accuracy in %, beside its sheet columns."""
    long = per_seed(runs)
    return long[long.metric == "accuracy_pct"]


def seeds_cell(values: pd.Series, prefix: str) -> dict:
    """A cell over seeds: n, mean and its 95% t-interval (none with one seed)."""
    low, high = t_interval(values.mean(), values.std(ddof=1), len(values))
    return {f"{prefix}_n_seeds": len(values), f"{prefix}_mean": values.mean(), f"{prefix}_ci_low": low,
            f"{prefix}_ci_high": high}  # fmt: skip


def paired_verdict(a: pd.Series, b: pd.Series, prefix: str, sign: int) -> dict:
    """a - b over the seeds both have (each indexed by seed), its 95% t-interval and the verdict on `sign`."""
    pairs = pd.concat([a, b], axis=1, join="inner").dropna()
    d = paired_difference(pairs.iloc[:, 0] - pairs.iloc[:, 1])
    return {prefix: d["diff"], f"{prefix}_ci_low": d["ci_low"], f"{prefix}_ci_high": d["ci_high"],
            f"{prefix}_n_pairs": d["n_pairs"], f"{prefix}_verdict": verdict_of(d["ci_low"], d["ci_high"], sign)}  # fmt: skip


def shown_cell(row, prefix: str) -> str:
    """'80.1 [79.2, 81.0] (5)': a cell's mean, interval and seeds; '-' without runs."""
    if not row[f"{prefix}_n_seeds"]:
        return "-"
    ci = "" if pd.isna(row[f"{prefix}_ci_low"]) else f" [{row[f'{prefix}_ci_low']:.1f}, {row[f'{prefix}_ci_high']:.1f}]"
    return f"{row[f'{prefix}_mean']:.1f}{ci} ({row[f'{prefix}_n_seeds']})"


def delta_cell(row, prefix: str) -> str:
    """'-1.2 [-2.0, -0.4]': a paired difference with its interval; '-' without pairs."""
    if pd.isna(row[prefix]):
        return "-"
    ci = (
        ""
        if pd.isna(row[f"{prefix}_ci_low"])
        else f" [{row[f'{prefix}_ci_low']:+.1f}, {row[f'{prefix}_ci_high']:+.1f}]"
    )
    return f"{row[prefix]:+.1f}{ci}"


def _plot(table: pd.DataFrame, x: str, curves: dict[str, str], xlabel: str, title: str, png_path) -> None:
    """Accuracy against `x` on a log axis, a curve per prefix of `curves` (prefix -> label), with 95% t-intervals."""
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for prefix, label in curves.items():
        mean = table[f"{prefix}_mean"]
        errors = [(mean - table[f"{prefix}_ci_low"]).fillna(0), (table[f"{prefix}_ci_high"] - mean).fillna(0)]
        ax.errorbar(table[x], mean, yerr=errors, marker="o", capsize=3, label=label)
    ax.set_xscale("log")
    ax.set_xticks(table[x], [f"{v:g}" for v in table[x]])
    ax.minorticks_off()  # the sweep's values label the axis
    ax.set_xlabel(xlabel)
    ax.set_ylabel("Validation accuracy % (mean, 95% t-interval)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=150)


def _finding1(a: str, b: str, sign: int, label) -> str:
    """'GloVe < Xavier': a Finding 1 check of `a` against `b`, named by `label` (initializer -> table name)."""
    return f"{label(a)} {'<' if sign < 0 else '>'} {label(b)}"


def _ks(ks) -> str:
    return ", ".join(f"{k:g}" for k in ks) or "none"


def _markdown(name: str, what: str, intro: str, header: list[str], cells: list[list[str]], verdicts: list[str]) -> str:
    """A sweep table's Markdown: title, how to read its cells, the table and its verdict lines."""
    return (
        f"# {name} (beyond the paper): {what}\n\n{intro} Accuracy in %: mean [95% t-interval] (seeds). Δ: paired by "
        "seed, mean [95% t-interval]; a verdict holds or is contradicted when the interval excludes zero on the "
        "claimed or the other side, else undecided.\n\n"
        + markdown_table(header, cells)
        + "\nVerdict:\n\n"
        + "\n".join(verdicts)
        + "\n"
    )


def table12(runs: pd.DataFrame, bases: list[str], csv_path, md_path, png_path) -> pd.DataFrame:
    """Table 12: a row per k, per base (columns `base`, `k` beside the sheet's) the accuracy over seeds and its
    paired difference to k = 1, and the first of `bases` minus the second at that k (does content matter at this k?)."""
    acc = _accuracy(runs).set_index("seed")
    scales = sorted(pd.unique(runs.k))
    first = runs.iloc[0]
    labels = {b: display_name(b, first.family) for b in bases}
    cells = {(b, k): acc.value[(acc.base == b) & (acc.k == k)] for b in bases for k in scales}
    rows = []
    for k in scales:
        row = {"block": first.block, "family": first.family, "source_display": first.source_display, "k": k}
        for b in bases:  # claimed: away from k = 1 the layer does worse
            one = cells.get((b, 1.0), acc.value.iloc[:0]) if k != 1 else acc.value.iloc[:0]
            row |= seeds_cell(cells[b, k], b) | paired_verdict(cells[b, k], one, f"{b}_diff_vs_k1", -1)
        if len(bases) == 2:  # claimed: the pre-trained content helps at the same scale
            row |= paired_verdict(cells[bases[0], k], cells[bases[1], k], "content_diff", +1)
        rows.append(row)
    table = pd.DataFrame(rows)
    parts = [(fmt, p) for b in bases for fmt, p in ((shown_cell, b), (delta_cell, f"{b}_diff_vs_k1"))]
    header = ["k", *(f"{labels[b]} {part}" for b in bases for part in ("acc % [95% CI] (n)", "Δ vs k = 1"))]
    lines = []
    for b in bases:
        means = table[f"{b}_mean"]
        falls = "falls" if means.is_monotonic_decreasing and means.is_unique else "does not fall"
        harm = _ks(table.k[table[f"{b}_diff_vs_k1_verdict"] == "holds"])
        lines.append(f"- {labels[b]}: accuracy {falls} monotonically with k (means); below k = 1's at k = {harm}.")
    if len(bases) == 2:
        parts += [(delta_cell, "content_diff"), (lambda r, p: r[p], "content_diff_verdict")]
        header += [f"{labels[bases[0]]} − {labels[bases[1]]}", "content helps"]
        by = {v: _ks(table.k[table.content_diff_verdict == v]) for v in ("holds", "contradicted", "undecided")}
        lines.append(
            f"- Content ({labels[bases[0]]} − {labels[bases[1]]} at the same k): helps (holds) at k = {by['holds']}; "
            f"hurts (contradicted) at k = {by['contradicted']}; undecided at k = {by['undecided']}."
        )
    cells_md = [[f"{r['k']:g}", *(fmt(r, p) for fmt, p in parts)] for _, r in table.iterrows()]
    intro = f"Each base layer times k ({first.block}: {first.source_display})."
    write_csv_md(csv_path, md_path, table, _markdown("Table 12", "scale dose-response", intro, header, cells_md, lines))
    title = f"Accuracy against the layer's scale k ({first.block})"
    _plot(table, "k", labels, "k (times the base layer's σ), log scale", title, png_path)
    return table


def table13(runs: pd.DataFrame, csv_path, md_path, png_path) -> pd.DataFrame:
    """Table 13: a row per learning rate (read from each run's final.json), per initializer the accuracy over seeds,
    and Finding 1's checks (GloVe < Xavier, GloVe_Xavier > GloVe) paired by seed with their verdicts."""
    runs = runs.assign(lr=[field(f, read_final(f), "lr") for f in runs.final])
    acc = _accuracy(runs).set_index("seed")
    inits, first = list(pd.unique(runs.initializer)), runs.iloc[0]
    labels = dict(zip(runs.initializer, runs.label))
    checks = [(a, b, sign) for a, b, sign in FINDING1 if a in inits and b in inits]
    rows = []
    for lr in sorted(pd.unique(runs.lr)):
        at = acc[acc.lr == lr]
        cells = {i: at.value[at.initializer == i] for i in inits}
        row = {"block": first.block, "family": first.family, "source_display": first.source_display, "lr": lr,
               "variant": at.variant.iloc[0]}  # fmt: skip
        for i in inits:
            row |= seeds_cell(cells[i], i)
        for a, b, sign in checks:
            row |= paired_verdict(cells[a], cells[b], f"{a}_minus_{b}", sign)
        rows.append(row)
    table = pd.DataFrame(rows)
    claims = {(a, b): _finding1(a, b, sign, labels.get) for a, b, sign in checks}
    header = ["lr", *(f"{labels[i]} acc % [95% CI] (n)" for i in inits)]
    header += [f"{claims[a, b]}: {part}" for a, b, _ in checks for part in ("Δ", "verdict")]
    cells_md = [
        [f"{r['lr']:g}", *(shown_cell(r, i) for i in inits)]
        + [c for a, b, _ in checks for c in (delta_cell(r, f"{a}_minus_{b}"), r[f"{a}_minus_{b}_verdict"])]
        for _, r in table.iterrows()
    ]
    lines = []
    for a, b, _ in checks:
        by = {v: ", ".join(f"{lr:g}" for lr in table.lr[table[f"{a}_minus_{b}_verdict"] == v]) or "none"
              for v in ("holds", "contradicted", "undecided")}  # fmt: skip
        lines.append(
            f"- {claims[a, b]}: holds at lr = {by['holds']}; contradicted at lr = {by['contradicted']}; "
            f"undecided at lr = {by['undecided']}."
        )
    intro = f"Finding 1 at each learning rate ({first.block}: {first.source_display})."
    write_csv_md(csv_path, md_path, table, _markdown("Table 13", "learning rate", intro, header, cells_md, lines))
    title = f"Accuracy against the learning rate ({first.block})"
    _plot(table, "lr", {i: labels[i] for i in inits}, "learning rate, log scale", title, png_path)
    return table


def table12_claims(frame: pd.DataFrame, label) -> list[tuple[str, str]]:
    """Table 12 claims each base below its k = 1 at every other k, and the first base above the second at each k."""
    bases = [c.removesuffix("_diff_vs_k1") for c in frame.columns if c.endswith("_diff_vs_k1")]
    tests = [(f"{b}_diff_vs_k1", f"{label(b)} at k = {{k:g}} below k = 1") for b in bases]
    if "content_diff" in frame:
        tests.append(("content_diff", f"{label(bases[0])} above {label(bases[1])} at k = {{k:g}}"))
    return tests


def table13_claims(frame: pd.DataFrame, label) -> list[tuple[str, str]]:
    """Table 13 claims Finding 1's checks at every learning rate."""
    return [(f"{a}_minus_{b}", f"{_finding1(a, b, sign, label)} at lr = {{lr:g}}")
            for a, b, sign in FINDING1 if f"{a}_minus_{b}" in frame]  # fmt: skip
