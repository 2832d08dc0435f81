"""GPU-hours of the paper's full grid, estimated on paper, with one training job per GPU and with k packed.

Runs: the training jobs that `snakemake -n` (target `all`) plans for config.yaml (every block, initializer, seed and
Table 3 variant). Time per run: its epochs x the paper's Table 5 minutes per epoch (training time on the
paper's GPU). Packing: the work of one run is measured in FLOPs (FlopCounterMode on the Multi30k GloVe
translator, D = 300, over Multi30k-like batches of 64), which with the paper's 1 minute per epoch gives the
share u of a GPU's fp32 peak that one job uses; k jobs packed on one GPU then need at best max(1/k, u) of the
unpacked GPU-hours (the bound assumes the share of the Multi30k GloVe job for every block).

  python bench/gpu_hours.py [--peak-tflops 19.5] [--pack 4]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

from embinit.training.batching import BucketBatchSampler, TranslationData
from embinit.workflow.config import load
from embinit.models import ModelConfig, Translator
import pandas as pd
from train_step import step_flops
from train_throughput import BATCH, MAX_LEN, N_SRC, N_TGT, synthetic_pairs, xavier

REPO = Path(__file__).resolve().parent.parent


def planned_runs() -> Counter:
    """Training runs per block in the full grid, from a dry run of the default target `all`."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "all", "-n", "--cores", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    outputs = "\n".join(line for line in proc.stdout.splitlines() if line.strip().startswith("output:"))
    runs = Counter(re.findall(r"results/([^/\s,]+)/[^/\s,]+/seed\d+/[^/\s,]+/final\.json", outputs))
    if not runs:
        raise SystemExit("the dry run of `all` planned no training runs")
    return runs


def flops_and_tokens_per_epoch() -> tuple[float, float]:
    """Training FLOPs per token of the D = 300 Multi30k translator, and Multi30k-like tokens per epoch."""
    with tempfile.TemporaryDirectory() as tmp:
        synthetic_pairs(Path(tmp) / "train.parquet", 29000, 0)
        data = TranslationData(Path(tmp) / "train.parquet", MAX_LEN)
    lengths = data.lengths()
    model = Translator(xavier(N_SRC, 300), xavier(N_TGT, 300), ModelConfig(heads=10))
    batches = [b for b, _ in zip(BucketBatchSampler(lengths, BATCH, 4, torch.Generator().manual_seed(0)), range(10))]
    tokens = sum(int(lengths[b].sum()) for b in batches)
    return step_flops(model, data, batches) / tokens, float(lengths.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peak-tflops", type=float, default=19.5, help="the GPU's fp32 peak (A100: 19.5)")
    parser.add_argument("--pack", type=int, default=4, help="k: training jobs packed on one GPU")
    args = parser.parse_args()

    config = load(REPO / "config.yaml")
    paper = pd.read_csv(REPO / "resources/paper_tables.csv")  # Table 5's rows: "<task> / <family>"
    minutes = paper[(paper.table == 5) & (paper.column == "train_minutes_per_epoch")].set_index("row").value
    runs = planned_runs()
    total = 0.0
    print("| block | runs | epochs | paper min/epoch | GPU-hours |\n|---|---|---|---|---|")
    for block, count in sorted(runs.items()):
        spec = config["blocks"][block]
        row = f"{spec['task']} / {spec['family']}"
        hours = count * spec["epochs"] * minutes[row] / 60
        total += hours
        print(f"| {block} | {count} | {spec['epochs']} | {minutes[row]:g} | {hours:.1f} |")
    per_token, tokens = flops_and_tokens_per_epoch()
    achieved = per_token * tokens / (60 * minutes["multi30k / GloVe"])
    share = achieved / (args.peak_tflops * 1e12)
    packed = total * max(1 / args.pack, share)
    print(f"\n{sum(runs.values())} runs: {total:.0f} GPU-hours with one job per GPU.")
    print(
        f"Multi30k GloVe: {per_token / 1e6:.1f} MFLOP per token x {tokens / 1e6:.2f}M tokens per epoch in "
        f"1 minute = {achieved / 1e12:.2f} TFLOP/s = {share:.1%} of a {args.peak_tflops:g} TFLOP/s fp32 peak."
    )
    print(f"Packed {args.pack} per GPU: at best {packed:.0f} GPU-hours ({packed / total:.0%} of unpacked).")


if __name__ == "__main__":
    main()
