"""Figure 1: validation BLEU per epoch, mean over seeds, a panel per block (SPEC section 4). Beyond the paper,
Figure 2: the mechanism metrics per epoch (embinit.training.mechanism), a row of panels per block."""

from __future__ import annotations

import re
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


# Figure 2's panels: quantity -> (axis label, log scale). sigma and input_ratio are of one side (the decoder's for
# translation, the encoder's for classification); entropy and saturation average every attention module's layers.
FIGURE2_QUANTITIES = {
    "sigma": ("σ of the input embedding", True),
    "input_ratio": ("‖x √D‖ / ‖P‖ at the input", True),
    "entropy": ("attention entropy (nats), mean of layers", False),
    "saturation": ("saturated rows (max weight > 0.99)", False),
    "grad_norm_embedding": ("‖∇ embedding‖", True),
    "grad_norm_other": ("‖∇ other parameters‖", True),
}


def mechanism_quantities(metrics: pd.DataFrame, side: str, path) -> pd.DataFrame:
    """Figure 2's quantities per epoch from one run's metrics.parquet (see FIGURE2_QUANTITIES)."""
    entropy = [c for c in metrics.columns if re.fullmatch(r"entropy_.+_\d+", c)]
    saturation = [c for c in metrics.columns if re.fullmatch(r"saturation_.+_\d+", c)]
    needed = ["epoch", f"sigma_{side}", f"input_ratio_{side}", "grad_norm_embedding", "grad_norm_other"]
    missing = [c for c in needed if c not in metrics.columns] + ([] if entropy else ["entropy_*"])
    missing += [] if saturation else ["saturation_*"]
    if missing:
        raise KeyError(
            f"{path}: metrics.parquet has no mechanism column(s) {missing}; Figure 2 needs runs trained with "
            "train.mechanism on (the default), so rerun them"
        )
    return pd.DataFrame(
        {
            "epoch": metrics.epoch,
            "sigma": metrics[f"sigma_{side}"],
            "input_ratio": metrics[f"input_ratio_{side}"],
            "entropy": metrics[entropy].mean(axis=1),
            "saturation": metrics[saturation].mean(axis=1),
            "grad_norm_embedding": metrics.grad_norm_embedding,
            "grad_norm_other": metrics.grad_norm_other,
        }
    )


def figure2(runs, metrics_paths, config: dict, png_path, csv_path, variant: str = "base") -> pd.DataFrame:
    """Figure 2 (beyond the paper): the mechanism metrics per epoch, a line per initializer with a band of one
    sigma over seeds; a panel per quantity (FIGURE2_QUANTITIES), a row per block of config `figure2`.

    `runs` are (final.json path, dict) pairs and `metrics_paths` their metrics.parquet files, in the same order,
    as for `figure1`. sigma and the input ratio are the decoder side's for translation, the encoder's for
    classification. Also writes the plotted numbers as long-form CSV: block, initializer, epoch, quantity, mean,
    std, n_seeds.
    """
    runs, metrics_paths = list(runs), [str(p) for p in metrics_paths]
    if len(runs) != len(metrics_paths):
        raise ValueError(f"Figure 2: {len(runs)} runs but {len(metrics_paths)} metrics files; give one per run")
    spec = config["figure2"]
    frames, sides = [], {}
    for (path, run), metrics_path in zip(runs, metrics_paths):
        block, init = field(path, run, "block"), field(path, run, "initializer")
        if block in spec["blocks"] and init in spec["initializers"] and field(path, run, "variant") == variant:
            sides[block] = "decoder" if field(path, run, "kind") == "translation" else "encoder"
            quantities = mechanism_quantities(pd.read_parquet(metrics_path), sides[block], metrics_path)
            frames.append(quantities.assign(block=block, initializer=init, seed=field(path, run, "seed")))
    missing = [b for b in spec["blocks"] if b not in sides]
    if missing:
        raise ValueError(f"Figure 2: no {variant} runs of blocks {missing}")
    long = pd.concat(frames).melt(["block", "initializer", "seed", "epoch"], var_name="quantity", value_name="value")
    curves = (
        long.groupby(["block", "initializer", "epoch", "quantity"])
        .value.agg(mean="mean", std="std", n_seeds="count")
        .reset_index()
    )
    rank = {
        "block": spec["blocks"],
        "initializer": ordered(curves.initializer, spec["initializers"]),
        "quantity": list(FIGURE2_QUANTITIES),
    }
    curves = curves.sort_values(
        ["block", "initializer", "quantity", "epoch"],
        key=lambda c: c.map({v: i for i, v in enumerate(rank[c.name])}) if c.name in rank else c,
        ignore_index=True,
    )[["block", "initializer", "epoch", "quantity", "mean", "std", "n_seeds"]]

    blocks = spec["blocks"]
    fig = Figure(figsize=(3.2 * len(FIGURE2_QUANTITIES), 3.0 * len(blocks) + 0.5), layout="constrained")
    axes = fig.subplots(len(blocks), len(FIGURE2_QUANTITIES), squeeze=False)
    for row, block in zip(axes, blocks):
        part, family = curves[curves.block == block], config["blocks"][block]["family"]
        for ax, (quantity, (label, log)) in zip(row, FIGURE2_QUANTITIES.items()):
            values = part[part.quantity == quantity]
            for init in ordered(values.initializer, spec["initializers"]):
                line = values[values.initializer == init]
                if line["mean"].isna().all():  # the input ratio of an encoding that adds nothing
                    continue
                drawn = ax.plot(line.epoch, line["mean"], marker="o", markersize=3, label=display_name(init, family))
                sigma = line["std"].fillna(0)  # one seed: no band
                ax.fill_between(
                    line.epoch,
                    line["mean"] - sigma,
                    line["mean"] + sigma,
                    color=drawn[0].get_color(),
                    alpha=0.2,
                    linewidth=0,
                )
            if log and ax.has_data() and (values["mean"].dropna() > 0).all():
                ax.set_yscale("log")
            ax.set_ylabel(label, fontsize=8)
            ax.set_xlabel("Epoch", fontsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.tick_params(labelsize=7)
        task = config["blocks"][block]["task"]
        row[0].set_title(f"{TASK_DISPLAY.get(task, task)} ({block}), {sides[block]} side", fontsize=9, loc="left")
        row[0].legend(fontsize=7)
    fig.suptitle("Mechanism metrics per epoch (mean ± σ over seeds)", fontsize=10)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    with atomic_path(csv_path) as tmp:
        curves.to_csv(tmp, index=False)
    return curves
