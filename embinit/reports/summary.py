"""The front page's figure and findings table, from result sets' committed outputs (rule `summary`): Table 3 at each
scale and Finding 1 on SST-2 as seeds, means and the paper's cells; each claim's Δ at each scale beside the paper's."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

CELLS = ["nopos_frozen", "nopos", "frozen", "base"]  # Table 3's cells: (trainable, P) no/no, yes/no, no/yes, yes/yes
CELL_NAMES = ["frozen, no P", "trainable, no P", "frozen + P", "trainable + P"]
LABELS = ["Xavier", "GloVe", "GloVe_Xavier"]
COLORS = {"Xavier": "tab:blue", "GloVe": "tab:orange", "GloVe_Xavier": "tab:green"}
SST2 = "sst2 accuracy_pct"


def _shown(runs: pd.DataFrame, output: str) -> pd.DataFrame:
    return runs[runs.shown_in.fillna("").str.split("; ").map(lambda names: output in names)]


def _panel(ax, runs: pd.DataFrame, paper: pd.DataFrame, groups: list[str], column, value, title: str, ylabel: str):
    """Per group and label: each seed a dot, the mean a bar, the paper's cell a black diamond."""
    for g, group in enumerate(groups):
        for k, label in enumerate(LABELS):
            x = g + (k - 1) * 0.26
            seeds = runs[(column(runs) == group) & (runs.label == label)]
            if seeds.empty:
                continue
            ax.scatter([x] * len(seeds), value(seeds), s=14, color=COLORS[label], alpha=0.7, zorder=3)
            ax.hlines(value(seeds).mean(), x - 0.11, x + 0.11, color=COLORS[label], lw=2.5, zorder=4)
            cell = paper.get((label, group))
            if cell is not None:
                ax.scatter([x], [cell], marker="D", s=22, color="black", zorder=5)
    ax.set_xticks(range(len(groups)), [CELL_NAMES[CELLS.index(g)] if g in CELLS else g for g in groups], fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def _cells(folder: Path) -> dict[str, str]:
    """A result set's Table 3 variants by the paper's cell they fill (table3.csv's `cell`)."""
    t3 = pd.read_csv(folder / "table3.csv").drop_duplicates("variant")
    return dict(zip(t3.variant, t3.cell))


def _table3_paper(comparison: pd.DataFrame) -> dict:
    t3 = comparison[(comparison.table == 3) & comparison.column.str.endswith(" bleu mean")]
    return {(r.row, r.column.removesuffix(" bleu mean")): r.paper for r in t3.itertuples()}


def figure(sets: dict[str, Path], f1_set: str, png, svg) -> None:
    """Table 3 at each scale (`sets`: scale -> result set) and Finding 1 on SST-2 (result set `f1_set`)."""
    plt.rcParams["svg.hashsalt"] = "summary"  # the SVG's ids fixed: the same records give the same file
    fig, axes = plt.subplots(1, len(sets) + 1, figsize=(4.2 * (len(sets) + 1), 3.6))
    for ax, (scale, folder) in zip(axes, sets.items()):
        runs, comparison = pd.read_csv(folder / "runs.csv"), pd.read_csv(folder / "paper_comparison.csv")
        t3, cell = _shown(runs, "table3"), _cells(folder)
        title = f"Table 3, Multi30k, D = {scale} ({folder.name})"
        _panel(ax, t3, _table3_paper(comparison), CELLS, lambda r: r.variant.map(cell), lambda r: r.test_paper_bleu,
               title, "test BLEU")  # fmt: skip
    folder = sets[f1_set]
    runs, comparison = pd.read_csv(folder / "runs.csv"), pd.read_csv(folder / "paper_comparison.csv")
    sst2 = _shown(runs, "table1")
    glove = set(sst2.block[(sst2.task == "sst2") & (sst2.label == "GloVe")])  # the SST-2 block of the GloVe family
    sst2 = sst2[sst2.block.isin(glove) & sst2.label.isin(LABELS) & (sst2.variant == "base")]
    t1 = comparison[(comparison.table == 1) & (comparison.column == f"{SST2} mean")]
    paper = {(r.row.split(" / ")[1], "SST-2"): r.paper for r in t1.itertuples() if r.row.startswith("GloVe / ")}
    _panel(axes[-1], sst2, paper, ["SST-2"], lambda r: pd.Series("SST-2", index=r.index),
           lambda r: 100 * r.best_valid_acc, f"Finding 1, SST-2 ({folder.name})", "dev accuracy %")  # fmt: skip
    handles = [plt.Line2D([], [], color=c, lw=2.5, label=n) for n, c in COLORS.items()]
    handles.append(plt.Line2D([], [], color="black", marker="D", ls="", label="paper"))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.text(0.99, 0.01, "GloVe: the GloVe 6B 50d stand-in (D = 300: up-projected); dots: seeds; bars: means",
             ha="right", va="bottom", fontsize=7, color="0.4")  # fmt: skip
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    for path in (png, svg):
        fig.savefig(path, dpi=130, metadata={"Date": None} if str(path).endswith(".svg") else {"Software": None})
    plt.close(fig)


def _ours(r) -> str:
    if r.n_seeds == 0:
        return f"{r.diff:+.2f} (exact), {r.verdict}"
    return f"{r.diff:+.1f} [{r.ci_low:+.1f}, {r.ci_high:+.1f}], {r.n_seeds} seeds, **{r.verdict}**"


def findings_table(sets: dict[str, Path]) -> str:
    """One row per claim and column measured in any set: the paper's Δ and ours at each scale (Markdown)."""
    frames = [pd.read_csv(folder / "findings.csv").assign(scale=scale) for scale, folder in sets.items()]
    rows = pd.concat(frames)
    rows["column"] = rows.column.str.replace(" accuracy_pct", " accuracy", regex=False)
    key = ["finding", "claim", "table", "column"]
    head = (
        "| finding | claim (Table: column) | paper Δ | " + " | ".join(f"ours, {f.name}" for f in sets.values()) + " |"
    )
    lines = [head, "|" + "---|" * (4 + len(sets) - 1)]
    for (finding, claim, table, column), part in rows.groupby(key, sort=False):
        by_scale = {r.scale: _ours(r) for r in part.itertuples()}
        paper = part.paper_diff.dropna()
        cells = [by_scale.get(s, "-") for s in sets]
        paper_text = f"{paper.iloc[0]:+.1f}" if len(paper) else "-"
        lines.append(f"| {finding} | {claim} (T{table}: {column}) | {paper_text} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
