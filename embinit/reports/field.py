"""Beyond the paper, Table 14: the field's initializers (docs/extending.md, "Methods from the literature") on the
paper's tasks, each against Xavier and against Pretrained_Xavier (the paper's proposal), with its figure.

It receives exactly its runs (the run sheet's rows, all under one variant: one training recipe) and the seed-0 layer
each run's initializer makes (the layer sheet's rows): accuracy or BLEU over seeds with its 95% t-interval, the
layer's sigma and its input's against the position encoding's, and each difference to a control paired by seed with
its three-valued verdict, as Tables 12 and 13 judge theirs (embinit.reports.sweeps).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from embinit.io import atomic_path
from embinit.layers.initializers import display_name
from embinit.layers.position_table import sinusoidal_table
from embinit.reports.format import TASK_DISPLAY, markdown_table, write_csv_md
from embinit.reports.statistics import matrix_stats
from embinit.reports.sweeps import delta_cell, paired_verdict, seeds_cell, shown_cell
from embinit.reports.tables import METRIC_DISPLAY, per_seed

METRIC = {"classification": "accuracy_pct", "translation": "bleu"}  # the score a row reports, by task kind
# The controls, by the CSV column prefix of the difference to them; the claim is that a method scores above each
CONTROLS = {"vs_xavier": "Xavier", "vs_proposal": "Pretrained_Xavier"}
VERDICT_COLOURS = {"holds": "tab:green", "contradicted": "tab:red", "undecided": "tab:gray"}


def _layer_sigma(path, pos_rows: int, pos_base: float) -> dict:
    """A layer's D and sigma, and sigma(x sqrt(D)) / sigma(P): its rows' scale at the model's input against the
    first pos_rows rows of the sinusoidal table they are added to (the mismatch Table 6 shows)."""
    layer = np.load(path, mmap_mode="r")
    dim, sigma = layer.shape[1], matrix_stats(layer)["sigma"]
    p_sigma = matrix_stats(sinusoidal_table(pos_rows, dim, pos_base))["sigma"]
    return {"dim": dim, "sigma": sigma, "p_sigma": p_sigma, "sigma_vs_p": sigma * math.sqrt(dim) / p_sigma}


def table14(
    runs: pd.DataFrame, layers: pd.DataFrame, section: dict, pos_base: float, csv_path, md_path, png_path
) -> pd.DataFrame:
    """Table 14: a row per block and initializer (the sheet's order): accuracy (%) or BLEU over seeds, its layer's
    sigma (`layers`: block, initializer, side, path), and the difference to Xavier and to Pretrained_Xavier of the block
    `section.controls` names for it (default its own), paired by seed, each claimed positive; `section.pos_rows`
    rows of P (base `pos_base`) set the layers' scale against it."""
    long = per_seed(runs)
    long = long[long.metric == long.kind.map(METRIC)]
    scores = {key: part.set_index("seed").value for key, part in long.groupby(["block", "initializer"], sort=False)}
    none = long.value.iloc[:0]
    paths = {(r.block, r.initializer): (r.side, r.path) for r in layers.itertuples()}
    family, controls, pos_rows = dict(zip(runs.block, runs.family)), section.get("controls", {}), section["pos_rows"]
    rows = []
    for r in runs.drop_duplicates(["block", "initializer"]).itertuples():
        ref, own = controls.get(r.block, r.block), scores[r.block, r.initializer]
        row = {"block": r.block, "task": r.task, "kind": r.kind, "family": r.family, "source_display": r.source_display,
               "initializer": r.initializer, "label": r.label, "metric": METRIC[r.kind], "controls": ref,
               "proposal_label": display_name(CONTROLS["vs_proposal"], family.get(ref, r.family))}  # fmt: skip
        side, path = paths[r.block, r.initializer]
        row |= {"side": side} | _layer_sigma(path, pos_rows, pos_base) | seeds_cell(own, "score")
        for prefix, control in CONTROLS.items():
            other = none if (ref, control) == (r.block, r.initializer) else scores.get((ref, control), none)
            row |= paired_verdict(own, other, prefix, +1)
        rows.append(row)
    table = pd.DataFrame(rows)
    write_csv_md(csv_path, md_path, table, _markdown(table, pos_rows))
    _plot(table, png_path)
    return table


def _metric(metric: str) -> str:
    return METRIC_DISPLAY[metric] + (" %" if metric == "accuracy_pct" else "")


def _verdict(row, prefix: str) -> str:
    return row[f"{prefix}_verdict"] if row[f"{prefix}_n_pairs"] else "-"


def _markdown(table: pd.DataFrame, pos_rows: int) -> str:
    """A section per block: its rows, then which methods score above, below or level with each control."""
    parts = []
    for block, part in table.groupby("block", sort=False):
        first = part.iloc[0]
        metric = _metric(first.metric)
        proposal = first.proposal_label
        header = ["Method", f"{metric} [95% CI] (n)", "σ", "σ√D / σ_P", "Δ vs Xavier", "verdict",
                  f"Δ vs {proposal}", "verdict"]  # fmt: skip
        cells = [
            [r.label, shown_cell(r, "score"), f"{r.sigma:.4f}", f"{r.sigma_vs_p:.3g}", delta_cell(r, "vs_xavier"),
             _verdict(r, "vs_xavier"), delta_cell(r, "vs_proposal"), _verdict(r, "vs_proposal")]
            for _, r in part.iterrows()
        ]  # fmt: skip
        lines = []
        for prefix, control in (("vs_xavier", "Xavier"), ("vs_proposal", proposal)):
            judged = part[part[f"{prefix}_n_pairs"] > 0]
            by = {v: ", ".join(judged.label[judged[f"{prefix}_verdict"] == v]) or "none" for v in VERDICT_COLOURS}
            lines.append(
                f"- Above {control}: holds for {by['holds']}; contradicted for {by['contradicted']}; undecided for "
                f"{by['undecided']}."
            )
        controls = "" if first.controls == block else f"; controls: the runs of {first.controls}"
        parts.append(
            f"## {block}\n\n{TASK_DISPLAY.get(first.task, first.task)}, D = {first.dim}, {first.source_display}"
            f"; σ of the {first.side}'s layer{controls}.\n\n"
            + markdown_table(header, cells)
            + "\n"
            + "\n".join(lines)
            + "\n"
        )
    return (
        "# Table 14 (beyond the paper): the field's initializers\n\nEach method against Xavier and against the "
        "paper's proposal (Pretrained_Xavier, named for its family), every run under the same training recipe. "
        "Accuracy in %, BLEU as is (paper BLEU): mean [95% t-interval] (seeds). σ: the seed-0 layer's; σ√D / σ_P: "
        f"its rows at the model's input against the first {pos_rows:,} rows of the position encoding. Δ: paired by "
        "seed, mean [95% t-interval]; the claim is that the method scores above the control: it holds or is "
        "contradicted when the interval excludes zero on that or the other side, else undecided.\n\n" + "\n".join(parts)
    )


def _plot(table: pd.DataFrame, png_path) -> None:
    """A panel per block: each method's score with its 95% t-interval, coloured by its verdict against the
    proposal, beside the two controls' means (lines)."""
    blocks = list(pd.unique(table.block))
    height = 1.8 + 0.35 * table.groupby("block").size().max()
    fig = Figure(figsize=(4.2 * len(blocks), height), layout="constrained")
    for ax, block in zip(fig.subplots(1, len(blocks), squeeze=False)[0], blocks):
        part = table[table.block == block].iloc[::-1]  # the first method on top
        ref = table[table.block == part.controls.iloc[0]].set_index("initializer")
        for control, style in (("Xavier", "--"), ("Pretrained_Xavier", ":")):
            if control in ref.index:
                ax.axvline(ref.score_mean[control], color="black", linestyle=style, lw=1, label=ref.label[control])
        y = np.arange(len(part))
        errors = [(part.score_mean - part.score_ci_low).fillna(0), (part.score_ci_high - part.score_mean).fillna(0)]
        colours = [VERDICT_COLOURS.get(v, "black") if n else "black"
                   for v, n in zip(part.vs_proposal_verdict, part.vs_proposal_n_pairs)]  # fmt: skip
        ax.errorbar(part.score_mean, y, xerr=errors, fmt="none", ecolor="gray", capsize=3)
        ax.scatter(part.score_mean, y, c=colours, zorder=3)
        ax.set_yticks(y, part.label, fontsize=8)
        ax.set_ylim(-0.6, len(part) - 0.4)
        first = part.iloc[0]
        ax.set_xlabel(f"{_metric(first.metric)} (mean, 95% t-interval)")
        ax.set_title(f"{block}\n{TASK_DISPLAY.get(first.task, first.task)}, D = {first.dim}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncols=2, frameon=False)
    fig.suptitle("Colour: verdict against the proposal (green above, red below, grey undecided)", fontsize=9)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=150)


def table14_claims(frame: pd.DataFrame, label) -> list[tuple[str, str]]:
    """Table 14 claims each method above Xavier and above the paper's proposal, in its block."""
    return [
        ("vs_xavier", "{label} above Xavier ({block})"),
        ("vs_proposal", "{label} above {proposal_label} ({block})"),
    ]
