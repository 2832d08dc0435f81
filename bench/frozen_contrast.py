"""Why do Table 3's frozen runs with the position encoding barely learn at D = 50? Per epoch, from committed run
records: the encoder's input ratio |x sqrt(D)| / |P|, the decoder's cross-attention entropy and the validation loss,
for Multi30k Xavier seed 0 trainable, frozen, and frozen on one side only, at D = 50 (results/offline-cpu) and at the
paper's D = 300 (results/paper-scale-cpu). An analysis of records, like bench/gpu_hours.py: it trains nothing.

  .venv/bin/python bench/frozen_contrast.py   # -> results/paper-scale-cpu/frozen_contrast.png, .csv and .md
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from embinit.io import atomic_path
from embinit.reports.format import write_csv_md

REPO = Path(__file__).resolve().parent.parent
RUNS = {  # (D, variant) -> the run's directory
    (50, "base"): "offline-cpu/multi30k_glove6b50d/Xavier/seed0/base",
    (50, "frozen"): "offline-cpu/multi30k_glove6b50d/Xavier/seed0/frozen",
    (50, "frozen_encoder"): "offline-cpu/multi30k_glove6b50d/Xavier/seed0/frozen_encoder",
    (50, "frozen_decoder"): "offline-cpu/multi30k_glove6b50d/Xavier/seed0/frozen_decoder",
    # the first model on length buckets at both scales (the paper-scale records are its *_legacy variants)
    (300, "base"): "paper-scale-cpu/multi30k_xavier300/Xavier/seed0/base_legacy",
    (300, "frozen"): "paper-scale-cpu/multi30k_xavier300/Xavier/seed0/frozen_legacy",
}
PANELS = {
    "input_ratio_encoder": ("encoder input ‖x √D‖ / ‖P‖", True),
    "cross_entropy": ("decoder cross-attention entropy (nats)", False),
    "valid_loss": ("validation loss", False),
}
TRAINS = {"base": "both", "frozen": "neither", "frozen_encoder": "decoder's only", "frozen_decoder": "encoder's only"}
STYLE = {"base": "C0", "frozen": "C3", "frozen_encoder": "C1", "frozen_decoder": "C2"}


def curves(results: Path) -> pd.DataFrame:
    """Per run that has a record and epoch: D, variant and the panels' quantities (cross-attention entropy: the
    mean of the decoder's layers)."""
    frames = []
    for (dim, variant), run in RUNS.items():
        path = results / run / "metrics.parquet"
        if path.exists():
            metrics = pd.read_parquet(path)
            cross = metrics.filter(regex=r"^entropy_decoder_cross_\d+$").mean(axis=1)
            frame = metrics[["epoch", "input_ratio_encoder", "valid_loss"]].assign(cross_entropy=cross)
            frames.append(frame.assign(dim=dim, variant=variant))
    return pd.concat(frames, ignore_index=True)[["dim", "variant", "epoch", *PANELS]]


def draw(table: pd.DataFrame, png_path) -> None:
    fig = Figure(figsize=(4.2 * len(PANELS), 3.6), layout="constrained")
    for ax, (column, (label, log)) in zip(fig.subplots(1, len(PANELS)), PANELS.items()):
        for (dim, variant), line in table.groupby(["dim", "variant"], sort=False):
            style = "-" if dim == 300 else "--"
            ax.plot(line.epoch, line[column], style, color=STYLE[variant], label=f"D = {dim}, {variant}")
        ax.set_yscale("log" if log else "linear")
        ax.set_xlabel("Epoch")
        ax.set_ylabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.axes[-1].legend(fontsize=7)
    fig.suptitle("Multi30k, Xavier, seed 0: embedding trainable, frozen, or frozen on one side", fontsize=10)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)


def outcomes(results: Path, table: pd.DataFrame) -> pd.DataFrame:
    """Per run: what trains, its test BLEU (paper's and sacreBLEU) at its best epoch, its lowest validation loss,
    and the encoder's input ratio and the decoder's cross-attention entropy at that epoch."""
    rows = []
    for (dim, variant), run in RUNS.items():
        path = results / run / "final.json"
        if path.exists():
            final = json.loads(path.read_text())
            at_best = table[(table.dim == dim) & (table.variant == variant) & (table.epoch == final["best_epoch"])]
            rows.append(
                {
                    "dim": dim,
                    "variant": variant,
                    "trains": TRAINS[variant],
                    "test_paper_bleu": final["test_paper_bleu"],
                    "test_sacrebleu": final["test_sacrebleu"],
                    "best_epoch": final["best_epoch"],
                    "epochs": final["epochs"],
                    "best_valid_loss": final["best_valid_loss"],
                    "input_ratio_encoder": at_best.input_ratio_encoder.iloc[0],
                    "cross_entropy": at_best.cross_entropy.iloc[0],
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    results = REPO / "results"
    table = curves(results)
    out = results / "paper-scale-cpu"
    out.mkdir(exist_ok=True)
    with atomic_path(out / "frozen_contrast.csv") as tmp:
        table.to_csv(tmp, index=False)
    draw(table, out / "frozen_contrast.png")
    runs = outcomes(results, table)
    header = "| D | variant | input embeddings that train | test BLEU (paper / sacre) | best epoch | lowest valid loss | encoder ratio | cross-attn entropy |"
    lines = [header, "|" + "---|" * 8]
    lines += [
        f"| {r.dim} | {r.variant} | {r.trains} | {r.test_paper_bleu:.1f} / {r.test_sacrebleu:.1f} | "
        f"{r.best_epoch} of {r.epochs} | {r.best_valid_loss:.2f} | {r.input_ratio_encoder:.2f} | {r.cross_entropy:.2f} |"
        for r in runs.itertuples()
    ]
    md = "# Multi30k Xavier seed 0: frozen, trainable, one side frozen\n\nAt each run's best epoch (lowest validation loss).\n\n"
    write_csv_md(out / "frozen_contrast_runs.csv", out / "frozen_contrast.md", runs, md + "\n".join(lines) + "\n")
    print(f"{table.groupby(['dim', 'variant']).size().to_dict()} epochs -> {out}/frozen_contrast.png, .csv")


if __name__ == "__main__":
    main()
