"""Figure 1: validation BLEU per epoch, mean over seeds, a panel per block (SPEC section 4). Beyond the paper,
Figure 2: the mechanism metrics per epoch (embinit.training.mechanism), a grid of panels per block."""

from __future__ import annotations

import math
import re
import textwrap
from typing import NamedTuple

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from embinit.io import atomic_path
from embinit.layers.initializers import display_name, reads_pretrained
from embinit.reports.format import TASK_DISPLAY


def _read_metrics(run, columns: list[str]) -> pd.DataFrame:
    """These columns of a run's metrics.parquet, with the run's block, initializer and label."""
    metrics = pd.read_parquet(run.metrics)
    missing = [c for c in columns if c not in metrics.columns]
    if missing:
        raise KeyError(f"{run.metrics}: metrics.parquet has no column(s) {missing}")
    return metrics[columns].assign(block=run.block, initializer=run.initializer, label=run.label)


def band(ax, line: pd.DataFrame, mean: str, std: str, label: str) -> None:
    """A curve per epoch with a band of one sigma over seeds (none with one seed)."""
    drawn = ax.plot(line.epoch, line[mean], marker="o", markersize=3, label=label)
    sigma = line[std].fillna(0)
    ax.fill_between(line.epoch, line[mean] - sigma, line[mean] + sigma, color=drawn[0].get_color(), alpha=0.2, lw=0)


def epoch_panel(ax, ylabel: str, legend_size: int) -> None:
    """A per-epoch panel's axes: whole epochs on x, the quantity on y, the legend."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("Epoch")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=legend_size)


def figure1(runs: pd.DataFrame, png_path, csv_path) -> pd.DataFrame:
    """Figure 1: validation BLEU per epoch, mean and a band of one sigma over seeds; a panel per block.

    `runs` are the run sheet's rows of Figure 1 (columns block, initializer, label, seed, metrics: the run's
    metrics.parquet, ...). Also writes the plotted curves as CSV.
    """
    curves = (
        pd.concat([_read_metrics(run, ["epoch", "valid_paper_bleu"]) for run in runs.itertuples()])
        .groupby(["block", "initializer", "label", "epoch"], sort=False)  # a label per block and initializer
        .valid_paper_bleu.agg(valid_bleu_mean="mean", valid_bleu_std="std", n_seeds="count")
        .reset_index()
    )
    blocks = runs.drop_duplicates("block")
    fig = Figure(figsize=(5 * len(blocks), 4), layout="constrained")
    for ax, block in zip(fig.subplots(1, len(blocks), squeeze=False)[0], blocks.itertuples()):
        part = curves[curves.block == block.block]
        for _, line in part.groupby("initializer", sort=False):
            band(ax, line.sort_values("epoch"), "valid_bleu_mean", "valid_bleu_std", line.label.iloc[0])
        task = TASK_DISPLAY.get(block.task, block.task)
        ax.set_title(f"{task} ({block.block})\n" + textwrap.fill(block.source_display, 60), fontsize=8)
        epoch_panel(ax, "Validation BLEU, paper's (mean ± σ over seeds)", 8)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=150)
    with atomic_path(csv_path) as tmp:
        curves.to_csv(tmp, index=False)
    return curves


class Panel(NamedTuple):
    """One of Figure 2's panels: its title and whether its values span decades (a log scale)."""

    title: str
    log: bool


# Figure 2's panels by quantity. sigma and input_ratio are of one side (the decoder's for translation, the
# encoder's for classification); entropy and saturation average every attention module's layers.
FIGURE2_QUANTITIES = {
    "sigma": Panel("σ of the input embedding", log=True),
    "input_ratio": Panel("‖x √D‖ / ‖P‖ at the input", log=True),
    "entropy": Panel("attention entropy (nats), mean of layers", log=False),
    "saturation": Panel("saturated rows (max weight > 0.99)", log=False),
    "grad_norm_embedding": Panel("‖∇ embedding‖", log=True),
    "grad_norm_other": Panel("‖∇ other parameters‖", log=True),
}
FIGURE2_COLUMNS = 3  # panels per row: a block's six panels in 2 x 3, readable at page width


def mechanism_quantities(run, side: str) -> pd.DataFrame:
    """Figure 2's quantities per epoch from one run's metrics.parquet (see FIGURE2_QUANTITIES), with its block,
    initializer and seed."""
    metrics = pd.read_parquet(run.metrics)
    layered = {q: [c for c in metrics.columns if re.fullmatch(rf"{q}_.+_\d+", c)] for q in ("entropy", "saturation")}
    needed = ["epoch", f"sigma_{side}", f"input_ratio_{side}", "grad_norm_embedding", "grad_norm_other"]
    missing = [c for c in needed if c not in metrics.columns] + [f"{q}_*" for q, cols in layered.items() if not cols]
    if missing:
        raise KeyError(
            f"{run.metrics}: metrics.parquet has no mechanism column(s) {missing}; Figure 2 needs runs trained with "
            "train.mechanism on (the default), so rerun them"
        )
    quantities = metrics[needed].rename(columns={f"sigma_{side}": "sigma", f"input_ratio_{side}": "input_ratio"})
    for q, cols in layered.items():
        quantities[q] = metrics[cols].mean(axis=1)
    return quantities[["epoch", *FIGURE2_QUANTITIES]].assign(
        block=run.block, initializer=run.initializer, seed=run.seed
    )


def side_label(run, side: str) -> str:
    """A run's name for one side's curves: its label, or where that side has no source and the initializer reads one
    (its layer is Xavier's draw), display_name's "(no source: Xavier)" form."""
    sourced = dict(part.split("=", 1) for part in run.sources.split("; ")).get(side, "none") != "none"
    if sourced or not reads_pretrained(run.initializer_entry):
        return run.label
    return display_name(run.initializer, run.family, sourced=False)


def figure2(runs: pd.DataFrame, png_path, csv_path) -> pd.DataFrame:
    """Figure 2 (beyond the paper): the mechanism metrics per epoch, a line per initializer with a band of one
    sigma over seeds; a panel per quantity (FIGURE2_QUANTITIES), FIGURE2_COLUMNS to a row, the blocks one below
    the other.

    `runs` are the run sheet's rows of Figure 2, as for `figure1`. Also writes the plotted numbers as long-form
    CSV: block, initializer, epoch, quantity, mean, std, n_seeds.
    """
    sides = {r.block: "decoder" if r.kind == "translation" else "encoder" for r in runs.itertuples()}
    frames = [mechanism_quantities(run, sides[run.block]) for run in runs.itertuples()]
    long = pd.concat(frames).melt(["block", "initializer", "seed", "epoch"], var_name="quantity", value_name="value")
    long["quantity"] = pd.Categorical(long.quantity, list(FIGURE2_QUANTITIES))
    for key in ("block", "initializer"):
        long[key] = pd.Categorical(long[key], pd.unique(runs[key]))
    curves = (
        long.groupby(["block", "initializer", "quantity", "epoch"], observed=True)
        .value.agg(mean="mean", std="std", n_seeds="count")
        .reset_index()[["block", "initializer", "epoch", "quantity", "mean", "std", "n_seeds"]]
    )
    labels = {(r.block, r.initializer): side_label(r, sides[r.block]) for r in runs.itertuples()}
    blocks = runs.drop_duplicates("block")
    rows = math.ceil(len(FIGURE2_QUANTITIES) / FIGURE2_COLUMNS)
    fig = Figure(figsize=(3.2 * FIGURE2_COLUMNS, (2.6 * rows + 0.8) * len(blocks) + 0.3), layout="constrained")
    for panels, block in zip(fig.subfigures(len(blocks), 1, squeeze=False)[:, 0], blocks.itertuples()):
        part = curves[curves.block == block.block]
        axes = panels.subplots(rows, FIGURE2_COLUMNS, squeeze=False).ravel()
        for ax, (quantity, panel) in zip(axes, FIGURE2_QUANTITIES.items()):
            values = part[part.quantity == quantity]
            for init, line in values.groupby("initializer", sort=False, observed=True):
                if not line["mean"].isna().all():  # the input ratio of an encoding that adds nothing has none
                    band(ax, line, "mean", "std", labels[(block.block, init)])
            if panel.log and ax.has_data() and (values["mean"].dropna() > 0).all():
                ax.set_yscale("log")
            ax.set_title(panel.title, fontsize=9)
            ax.set_xlabel("Epoch", fontsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.tick_params(which="both", labelsize=7)  # a log axis labels its minor ticks too
        task = TASK_DISPLAY.get(block.task, block.task)
        panels.suptitle(f"{task} ({block.block}), {sides[block.block]} side", fontsize=10)
        handles, names = axes[0].get_legend_handles_labels()
        panels.legend(handles, names, loc="outside lower center", ncols=len(names), fontsize=8)
    fig.suptitle("Mechanism metrics per epoch (mean ± σ over seeds)", fontsize=11)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    with atomic_path(csv_path) as tmp:
        curves.to_csv(tmp, index=False)
    return curves
