"""Figure 1: validation BLEU per epoch, mean over seeds, a panel per block (SPEC section 4)."""

from __future__ import annotations

import textwrap

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from embinit.io import atomic_path
from embinit.layers.initializers import display_name
from embinit.reports.format import TASK_DISPLAY
from embinit.reports.tables import block_sources, field, ordered


def _epoch_metrics(path, columns: list[str]) -> pd.DataFrame:
    metrics = pd.read_parquet(path)
    missing = [c for c in columns if c not in metrics.columns]
    if missing:
        raise KeyError(f"{path}: metrics.parquet has no column(s) {missing}")
    return metrics[columns]


def figure1(runs, metrics_paths, config: dict, png_path, csv_path, variant: str = "base") -> pd.DataFrame:
    """Figure 1: validation BLEU per epoch, mean and a band of one sigma over seeds; a panel per block.

    `runs` are (final.json path, dict) pairs (`tables.load_runs`) and `metrics_paths` their metrics.parquet
    files, in the same order: run i's curve is read from metrics_paths[i], and only for the runs config
    `figure1` selects. Also writes the plotted curves as CSV.
    """
    runs, metrics_paths = list(runs), [str(p) for p in metrics_paths]
    if len(runs) != len(metrics_paths):
        raise ValueError(f"Figure 1: {len(runs)} runs but {len(metrics_paths)} metrics files; give one per run")
    spec = config["figure1"]
    frames = []
    for (path, run), metrics_path in zip(runs, metrics_paths):
        block, init = field(path, run, "block"), field(path, run, "initializer")
        if block in spec["blocks"] and init in spec["initializers"] and field(path, run, "variant") == variant:
            metrics = _epoch_metrics(metrics_path, ["epoch", "valid_paper_bleu"])
            frames.append(metrics.assign(block=block, initializer=init, seed=field(path, run, "seed")))
    columns = ["block", "initializer", "epoch", "valid_paper_bleu"]
    curves = pd.concat(frames) if frames else pd.DataFrame(columns=columns)
    missing = [b for b in spec["blocks"] if b not in set(curves.block)]
    if missing:
        raise ValueError(f"Figure 1: no {variant} runs of blocks {missing}")
    curves = (
        curves.groupby(["block", "initializer", "epoch"], sort=False)
        .valid_paper_bleu.agg(valid_bleu_mean="mean", valid_bleu_std="std", n_seeds="count")
        .reset_index()
    )
    curves.insert(
        2, "label", [display_name(i, config["blocks"][b]["family"]) for b, i in zip(curves.block, curves.initializer)]
    )

    fig = Figure(figsize=(5 * len(spec["blocks"]), 4), layout="constrained")
    for ax, block in zip(fig.subplots(1, len(spec["blocks"]), squeeze=False)[0], spec["blocks"]):
        part = curves[curves.block == block]
        for init in ordered(part.initializer, spec["initializers"]):
            line = part[part.initializer == init].sort_values("epoch")
            drawn = ax.plot(line.epoch, line.valid_bleu_mean, marker="o", markersize=3, label=line.label.iloc[0])
            sigma = line.valid_bleu_std.fillna(0)  # one seed: no band
            ax.fill_between(
                line.epoch,
                line.valid_bleu_mean - sigma,
                line.valid_bleu_mean + sigma,
                color=drawn[0].get_color(),
                alpha=0.2,
                linewidth=0,
            )
        task = config["blocks"][block]["task"]
        task = TASK_DISPLAY.get(task, task)
        ax.set_title(f"{task} ({block})\n" + textwrap.fill(block_sources(config, block)[1], 60), fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("Epoch")
        ax.set_ylabel("Validation BLEU, paper's (mean ± σ over seeds)")
        ax.legend(fontsize=8)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=150)
    with atomic_path(csv_path) as tmp:
        curves.to_csv(tmp, index=False)
    return curves
