"""Does stacking pay? k translators trained as one model with a leading run axis (torch.func: stacked weights,
`functional_call` under `vmap`, dropout drawn per run) against the same k stepped one after another, in one process.

Issue 59's question before any training code changes: a D = 300 step on a GPU is bound by kernel launches (17 ms for
well under 1 ms of arithmetic, docs/performance.md), so one launch for k runs could train k runs in about one run's
time; on the CPU arithmetic is the bound and stacking may not pay. This measures both with the pipeline's own model
(embinit.models.Translator: the recipe's parametrization, dropout 0.1), random batches of 64 over the Multi30k
vocabularies' sizes (synthetic pairs, bench/train_throughput.py), Adam, fp32. Each stacked step pads the k runs'
batches to their longest source and target (a run's own batch order differs from the others'), so the figure pays
for that padding. Nothing here is a run: the numbers are steps, not results.

  alone s/step    one run's training step, the k runs stepped one after another (the mean)
  stacked s/step  one step of all k runs stacked
  speedup         k x alone / stacked: how many times more runs a second stacking trains
  pad share       the stacked batches' pad tokens over all tokens (the alone batches' in parentheses)
  loss rel. diff  the largest relative difference between a run's stacked loss and its own model's, dropout off,
                  on the first stacked batch: the stacked model computes what the k models do

  PYTHONPATH=.:bench python bench/stacked_step.py --device cpu --dims 50 300 --ks 1 4 --steps 6
  PYTHONPATH=.:bench python bench/stacked_step.py --device cuda --dims 300 --ks 1 8 16 32   # a GPU, one call
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from embinit.config import heads_for
from embinit.data.vocab import PAD
from embinit.models import ModelConfig, Translator
from embinit.training.batching import load_dataset
from gpu_step import ADAM, HEADS, draw_batches
from train_throughput import MAX_LEN, N_SRC, N_TGT, synthetic_pairs, xavier

BATCH, LR = 64, 2e-4


def translators(k: int, dim: int, device: torch.device) -> list[Translator]:
    """k translators of their own seeds (weights and Xavier layers), as k runs of one block."""
    models = []
    for seed in range(k):
        torch.manual_seed(seed)
        models.append(Translator(xavier(N_SRC, dim), xavier(N_TGT, dim), ModelConfig(heads=heads_for(HEADS, dim))))
    return [m.to(device).train() for m in models]


def padded(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The k runs' (src, tgt) batches padded to their longest, stacked on a leading run axis."""
    s = max(src.shape[1] for src, _ in batches)
    t = max(tgt.shape[1] for _, tgt in batches)
    src = torch.stack([F.pad(x, (0, s - x.shape[1]), value=PAD) for x, _ in batches])
    tgt = torch.stack([F.pad(y, (0, t - y.shape[1]), value=PAD) for _, y in batches])
    return src, tgt


def pad_share(tensors) -> float:
    total = sum(t.numel() for t in tensors)
    return sum(int((t == PAD).sum()) for t in tensors) / total


def wait(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def alone(models, batches, device, steps: int) -> float:
    """Seconds per run-step, each run its own model and optimizer, stepped one after another."""
    optimizers = [
        torch.optim.Adam(m.parameters(), lr=LR, betas=ADAM["adam_betas"], eps=ADAM["adam_eps"]) for m in models
    ]

    def step(i: int) -> None:
        for run, (model, optimizer) in enumerate(zip(models, optimizers)):
            src, tgt = batches[run][i]
            optimizer.zero_grad(set_to_none=True)
            model.loss(src, tgt, fused=False).backward()
            optimizer.step()

    step(0)  # warm-up
    wait(device)
    began = time.perf_counter()
    for i in range(1, steps + 1):
        step(i)
    wait(device)
    return (time.perf_counter() - began) / (steps * len(models))


def stacked(models, batches, device, steps: int) -> tuple[float, float, float]:
    """Seconds per step of all k runs as one: stacked weights, one vmapped loss, one Adam over the stacks (Adam is
    elementwise, so each run's slice steps as its own optimizer would); with the stacked batches' pad share and the
    largest relative difference of a run's stacked loss from its own model's (dropout off)."""
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    optimizer = torch.optim.Adam(params.values(), lr=LR, betas=ADAM["adam_betas"], eps=ADAM["adam_eps"])

    def step_loss(p, b, src, tgt):  # one run's: (B, S) and (B, T) ids, as Translator.loss's padded path
        logits = functional_call(base, (p, b), (src, tgt[:, :-1]), strict=True)  # (B, T - 1, V)
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD, reduction="sum")

    batched = vmap(step_loss, in_dims=(0, 0, 0, 0), randomness="different")
    stacks = [padded([batches[run][i] for run in range(len(models))]) for i in range(steps + 1)]
    for module in (base, *models):
        module.eval()
    with torch.no_grad():  # without dropout, each run's stacked loss is its own model's on the same padded batch
        src, tgt = stacks[0]
        own = torch.stack([m.loss(src[r], tgt[r], fused=False) for r, m in enumerate(models)])
        differ = float(((batched(params, buffers, src, tgt) - own).abs() / own.abs()).max())
    for module in (base, *models):
        module.train()

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        batched(params, buffers, *stacks[i]).sum().backward()
        optimizer.step()

    step(0)
    wait(device)
    began = time.perf_counter()
    for i in range(1, steps + 1):
        step(i)
    wait(device)
    return (time.perf_counter() - began) / steps, pad_share([t for s in stacks for t in s]), differ


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
                    [
                        tuple(t.to(device) for t in data.batch(ix))
                        for ix in draw_batches(data, BATCH, args.steps + 1, run)
                    ]
                    for run in range(k)
                ]
                models = translators(k, dim, device)
                one = alone(models, batches, device, args.steps)
                models = translators(k, dim, device)
                together, share, differ = stacked(models, batches, device, args.steps)
                own = pad_share([t for run in batches for pair in run for t in pair])
                rows.append(
                    {"D": dim, "k": k, "alone s/step": one, "stacked s/step": together,
                     "speedup": k * one / together, "pad share": f"{share:.2f} ({own:.2f})",
                     "loss rel. diff": differ}
                )  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
