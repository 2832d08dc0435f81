"""Does stacking pay? k translators trained as one stacked model (embinit.training.stacked.Stack: a leading run axis
on every weight, each run's dropout from its own generator) against the same k stepped one after another, in one
process, each step through the pipeline's own step path (embinit.training.epoch.train_step, Stack.step).

A D = 300 step on a GPU is bound by kernel launches (17 ms for well under 1 ms of arithmetic, docs/performance.md), so
one launch for k runs could train k runs in about one run's time; on the CPU arithmetic is the bound and stacking may
not pay. Measured with the pipeline's model (embinit.models.Translator: the recipe's parametrization, dropout 0.1),
random batches of 64 over the Multi30k vocabularies' sizes (synthetic pairs, bench/train_throughput.py), Adam, fp32.
Each stacked step pads the k runs' batches to their longest source and target (a run's own batch order differs from
the others'), so the figure pays for that padding. Nothing here is a run: the numbers are steps, not results.

  alone s/step    one run's training step, the k runs stepped one after another (the mean)
  stacked s/step  one step of all k runs stacked
  speedup         k x alone / stacked: how many times more runs a second stacking trains
  pad share       the stacked batches' pad tokens over all tokens (the alone batches' in parentheses)
  loss rel. diff  the largest relative difference between a run's stacked loss and its own model's, dropout off,
                  on the first batch: the stacked model computes what the k models do
  peak MiB        (CUDA) the device's peak memory during the stacked steps

  PYTHONPATH=.:bench python bench/stacked_step.py --device cpu --dims 50 300 --ks 1 4 --steps 6
  PYTHONPATH=.:bench python bench/stacked_step.py --device cuda --dims 300 --ks 1 8 16 32   # a GPU, one call
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from embinit.models.config import heads_for
from embinit.data.vocab import PAD
from embinit.models import ModelConfig, Translator
from embinit.training.batching import load_dataset
from embinit.training.device import step_policy
from embinit.training.epoch import train_step
from embinit.training.stacked import Stack
from gpu_step import ADAM, HEADS, draw_batches
from train_throughput import MAX_LEN, N_SRC, N_TGT, synthetic_pairs, xavier

BATCH, LR = 64, 2e-4


def runs(k: int, dim: int, device: torch.device) -> list[SimpleNamespace]:
    """k runs of one block, each a translator of its own seed (weights and Xavier layers) and its Adam: what Stack
    takes of a run."""
    made = []
    for seed in range(k):
        torch.manual_seed(seed)
        model = Translator(xavier(N_SRC, dim), xavier(N_TGT, dim), ModelConfig(heads=heads_for(HEADS, dim)))
        model = model.to(device).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=ADAM["adam_betas"], eps=ADAM["adam_eps"])
        made.append(SimpleNamespace(model=model, optimizer=optimizer, spec=SimpleNamespace(lr=LR, train=ADAM)))
    return made


def pad_share(tensors) -> float:
    total = sum(t.numel() for t in tensors)
    return sum(int((t == PAD).sum()) for t in tensors) / total


def wait(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step, steps: int, device: torch.device) -> float:
    """Seconds per call of step(i) for i = 1 .. steps, after step(0) as warm-up."""
    step(0)
    wait(device)
    began = time.perf_counter()
    for i in range(1, steps + 1):
        step(i)
    wait(device)
    return (time.perf_counter() - began) / steps


def alone(members, batches, device, steps: int) -> float:
    """Seconds per run-step, each run its own model and optimizer, stepped one after another."""
    policy = step_policy(device)

    def step(i: int) -> None:
        for run, member in enumerate(members):
            train_step(member.model, member.optimizer, batches[run][i], device, False, policy)

    return timed(step, steps, device) / len(members)


def stacked(members, batches, device, steps: int) -> tuple[float, float, float]:
    """Seconds per step of all k runs as one Stack; with the stacked batches' pad share and the largest relative
    difference of a run's stacked loss from its own model's (dropout off)."""
    generators = [torch.Generator(device=device).manual_seed(run) for run in range(len(members))]
    stack, policy = Stack(members, generators), step_policy(device)
    with torch.no_grad():  # without dropout, each run's stacked loss is its own model's on its own batch
        stack.model.eval()
        first = [batches[run][0] for run in range(len(members))]
        src, tgt = (t.to(device) for t in stack.batch(first))
        together = stack.losses(src, tgt, policy.fused_loss)
        own = torch.stack(
            [m.model.eval().loss(*(t.to(device) for t in b), fused=False) for m, b in zip(members, first)]
        )
        differ = float(((together - own).abs() / own.abs()).max())
        stack.model.train()
    shares = [t for i in range(steps + 1) for t in stack.batch([batches[run][i] for run in range(len(members))])]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = timed(lambda i: stack.step([run[i] for run in batches], device, False, policy), steps, device)
    return seconds, pad_share(shares), differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dims", type=int, nargs="+", default=[50, 300])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.parquet"
        synthetic_pairs(path, 4000, seed=0)
        data = load_dataset("translation", str(path), MAX_LEN)
        rows = []
        for dim in args.dims:
            for k in args.ks:
                batches = [
                    [data.batch(ix) for ix in draw_batches(data, BATCH, args.steps + 1, run)] for run in range(k)
                ]
                one = alone(runs(k, dim, device), batches, device, args.steps)
                together, share, differ = stacked(runs(k, dim, device), batches, device, args.steps)
                own = pad_share([t for run in batches for pair in run for t in pair])
                rows.append(
                    {"D": dim, "k": k, "alone s/step": one, "stacked s/step": together,
                     "speedup": k * one / together, "pad share": f"{share:.2f} ({own:.2f})",
                     "loss rel. diff": differ,
                     "peak MiB": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None}
                )  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
