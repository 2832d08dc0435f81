"""Training step: the pipeline's step against the step it replaced, on the Multi30k translator.

new: embinit.training.epoch (Translator.loss: output projection fused with the cross-entropy over real tokens only;
     attention weights with the cheap CPU dropout mask; fused Adam).
old: the step before, kept here as the baseline: full (B, T, N) logits and F.cross_entropy with
     ignore_index, SDPA's own attention dropout (bernoulli_), the previous layer-dropout multiply, and
     torch's default (per-tensor loop) Adam on the CPU.
Both start from the same weights and train on the same batches (real Multi30k batches of 64 when
data/tokenized/multi30k/spacy exists, else Multi30k-like synthetic ones), in rounds that alternate old and
new in one process, so a busy machine slows both alike. Throughput = real source + target tokens per
second of training steps; GFLOP/s counts the step's matrix products (torch's FlopCounterMode), against the
rate this process reaches on a large fp32 matrix product (the CPU's attainable peak). The last line is
`ratio: X`, new tokens/s over old.

With --jobs k, the new step runs as k jobs side by side, each with threads / k threads and its own copy of the
model, each training on the same batches (what `snakemake --set-threads train=1` does with the pipeline's
runs); its throughput is all jobs' tokens over the wall time of the round. The old step stays one job with all
threads, so the ratio is the machine's throughput, new over old.

  python bench/train_step.py --dim 300 [--quick] [--threads 2] [--jobs 1] [--data DIR]
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import tempfile
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from embinit.training.batching import BucketBatchSampler, TranslationData
from embinit.models import ModelConfig, Translator
from embinit.models.layers import Dropout, MultiHeadAttention
from embinit.training.epoch import adam, batch_loss, train_epoch
from embinit.data.vocab import PAD
from train_throughput import BATCH, MAX_LEN, N_SRC, N_TGT, synthetic_pairs, xavier

REAL_DATA = Path("data/tokenized/multi30k/spacy")
ADAM = {"adam_betas": [0.9, 0.98], "adam_eps": 1e-9}
CPU = torch.device("cpu")


# --- the old step (the code this bench measures against) ---------------------------------------------------


def old_dropout(self, x):
    if not self.training or self.p == 0:
        return x
    n = x.numel()
    draws = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
    keep = draws.view(torch.int16)[:n].view(x.shape) >= self.threshold
    return x * keep * (1.0 / (1.0 - self.p))


def old_attend(self, x, k, v, keep=None, causal=False, position=None, start=0):  # sinusoidal: position unused here
    batch, length, dim = x.shape
    y = F.scaled_dot_product_attention(
        self.split(self.query(x)),
        k,
        v,
        attn_mask=keep,
        is_causal=causal,
        dropout_p=self.dropout.p if self.training else 0.0,
    )
    return self.out(y.transpose(1, 2).reshape(batch, length, dim))


def old_loss(self, src, tgt, fused=True):  # fused: the pipeline's argument; the old step had one path
    logits = self(src, tgt[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD, reduction="sum")


def as_old(model: Translator) -> Translator:
    """A copy of `model` (same weights) that runs the old step's code."""
    old = copy.deepcopy(model)
    for module in old.modules():
        if isinstance(module, Dropout):
            module.forward = types.MethodType(old_dropout, module)
        if isinstance(module, MultiHeadAttention):
            module.attend = types.MethodType(old_attend, module)
    old.loss = types.MethodType(old_loss, old)
    return old


def old_adam(model: Translator) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.9, 0.98), eps=1e-9)


# --- measurement ---------------------------------------------------------------------------------------------


def step_flops(model, data, batches) -> float:
    """Matrix-product FLOPs of forward + backward over `batches` (counted on a throwaway copy)."""
    model = copy.deepcopy(model)
    with FlopCounterMode(display=False) as counter:
        for indices in batches:
            loss, n = batch_loss(model, data.batch(indices), CPU)
            (loss / n).backward()
    return float(counter.get_total_flops())


def matmul_peak(seconds: float = 2.0) -> float:
    """GFLOP/s of a 2048 x 2048 fp32 matrix product: the rate this process can reach on this CPU."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    began, count = time.perf_counter(), 0
    while time.perf_counter() - began < seconds:
        a @ b
        count += 1
    return 2 * 2048**3 * count / (time.perf_counter() - began) / 1e9


def data_file(path: str | None, seed: int, scratch: Path) -> tuple[Path, str]:
    """The tokenized Multi30k train split, else a synthetic Multi30k-like one written to `scratch`."""
    if path is None and (REAL_DATA / "train.parquet").exists():
        path = str(REAL_DATA)
    if path:
        return Path(path) / "train.parquet", f"Multi30k train ({path})"
    synthetic_pairs(scratch / "train.parquet", 29000, seed)
    return scratch / "train.parquet", "synthetic Multi30k-like"


def side_by_side_job(connection, dim: int, heads: int, threads: int, data_path: str, seed: int) -> None:
    """One of the --jobs workers: the new step on its own model copy, one chunk of batches per request."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    data = TranslationData(data_path, MAX_LEN)
    model = Translator(xavier(N_SRC, dim), xavier(N_TGT, dim), ModelConfig(heads=heads))
    optimizer = adam(model, 2e-4, ADAM)
    while (chunk := connection.recv()) is not None:
        connection.send(train_epoch(model, optimizer, data, chunk, CPU, False)[1])


class SideBySide:
    """k worker processes that train the same chunk at once; `run` returns all their tokens."""

    def __init__(self, jobs: int, threads: int, dim: int, heads: int, data_path: str, seed: int):
        context = multiprocessing.get_context("spawn")
        self.connections, self.workers = [], []
        for _ in range(jobs):
            parent, child = context.Pipe()
            worker = context.Process(target=side_by_side_job, args=(child, dim, heads, threads, data_path, seed))
            worker.start()
            self.connections.append(parent)
            self.workers.append(worker)

    def run(self, chunk) -> int:
        for connection in self.connections:
            connection.send(chunk)
        return sum(connection.recv() for connection in self.connections)

    def close(self) -> None:
        for connection in self.connections:
            connection.send(None)
        for worker in self.workers:
            worker.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=300, help="D: 300 (GloVe 840B) or 50 (GloVe 6B 50d)")
    parser.add_argument("--heads", type=int, default=None, help="default: 10 for D = 300 or 50, else 8")
    parser.add_argument("--data", help="tokenized Multi30k folder; default: the pipeline's, else synthetic")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 4 steps (under 2 minutes)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round and loop")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=1, help="new step as this many jobs of threads / jobs threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds, args.warmup = 4, 3, 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    heads = args.heads or (10 if args.dim in (50, 300) else 8)

    scratch = tempfile.TemporaryDirectory()
    path, source = data_file(args.data, args.seed, Path(scratch.name))
    data = TranslationData(path, MAX_LEN)
    lengths = data.lengths()
    sampler = BucketBatchSampler(lengths, BATCH, 4, torch.Generator().manual_seed(args.seed))
    batches = [b for b, _ in zip(sampler, range(args.warmup + args.rounds * args.steps))]
    new = Translator(xavier(N_SRC, args.dim), xavier(N_TGT, args.dim), ModelConfig(heads=heads))
    old = as_old(new)
    in_process = {"old": (old, old_adam(old)), "new": (new, adam(new, 2e-4, ADAM))}
    loops = {
        name: lambda chunk, m=m, o=o: train_epoch(m, o, data, chunk, CPU, False)[1]
        for name, (m, o) in in_process.items()
    }
    side = None
    if args.jobs > 1:  # the new step as jobs side by side, threads split between them
        side = SideBySide(args.jobs, args.threads // args.jobs, args.dim, heads, str(path), args.seed)
        loops["new"] = side.run

    for run in loops.values():
        run(batches[: args.warmup])
    tokens, seconds, cpu = dict.fromkeys(loops, 0), dict.fromkeys(loops, 0.0), dict.fromkeys(loops, 0.0)
    for r in range(args.rounds):
        chunk = batches[args.warmup + r * args.steps : args.warmup + (r + 1) * args.steps]
        for name, run in loops.items():
            began, began_cpu = time.perf_counter(), time.process_time()
            tokens[name] += run(chunk)  # the pipeline's own loop (train_epoch), in this process or the jobs'
            seconds[name] += time.perf_counter() - began
            cpu[name] += time.process_time() - began_cpu
    if side is not None:
        side.close()
    timed = batches[args.warmup :]
    flops = step_flops(new, data, timed)  # the real tokens' products: the useful work of either step
    peak = matmul_peak()

    print(
        f"data: {source}; D = {args.dim}, {heads} heads, {new.num_parameters():,} parameters, batch {BATCH}; "
        f"cpu, {torch.get_num_threads()} threads; torch {torch.__version__}"
    )
    if side is not None:
        print(f"new: {args.jobs} jobs side by side, {args.threads // args.jobs} thread(s) each; old: one job")
    print(
        f"{args.rounds} rounds x {args.steps} steps per loop, alternating, after {args.warmup} warm-up steps; "
        f"{flops / sum(int(lengths[b].sum()) for b in timed) / 1e6:.1f} MFLOP per token (matrix products)"
    )
    print(f"attainable peak (2048^2 fp32 matmul, {torch.get_num_threads()} threads): {peak:.0f} GFLOP/s")
    rate = {}
    for name in loops:
        rate[name] = tokens[name] / seconds[name]
        jobs = args.jobs if name == "new" and side is not None else 1
        gflops = jobs * flops / seconds[name] / 1e9
        cpu_note = "" if jobs > 1 else f" ({1000 * cpu[name] / len(timed):6.1f} ms CPU)"
        print(
            f"{name}: {rate[name]:8.0f} tokens/s, {1000 * seconds[name] / len(timed):6.1f} ms/step{cpu_note}, "
            f"{gflops:5.1f} GFLOP/s = {gflops / peak:.0%} of peak"
        )
    scratch.cleanup()
    print(f"ratio: {rate['new'] / rate['old']:.2f}")


if __name__ == "__main__":
    main()
