"""Training steps on a GPU (or the CPU): steps/s, tokens/s, peak memory and the loss's share of a step, for the
Multi30k translator and the SST-2 classifier at D = 300, fp32 and bf16, as 1 and k runs sharing one device.

Needs only torch, numpy, pandas and pyarrow (no network, no ../shared): the batches are synthetic, drawn from a
seed and written in the tokenized Parquet layout (Multi30k-like pairs over the Multi30k GloVe block's vocabularies,
7,853 de / 5,893 en; SST-2-like sentences over 13,439 words, the SST-2 vocabulary at min_freq 2), and read back
through the pipeline's own datasets. Each setting runs k fresh worker processes (the profiles' packing: k runs on one
device), each with its own model, training with the pipeline's loop (embinit.training.epoch.train_epoch, so the
device's StepPolicy) on the same batches; they start their timed steps together.

  steps/s    one run's steps per second (the mean over the k runs)
  tokens/s   real (non-pad) tokens per second of all k runs together, from the first start to the last end
  peak MiB   the most one run held in its timed steps: CUDA's max_memory_allocated; on the CPU (Linux) the
             process's peak resident set, torch itself included
  loss %     the loss alone (output projection and cross-entropy, forward and backward, the device's path) on
             final states of the timed batches' shapes, over the time of the timed steps; the k runs time it
             together too (eager, on the compiled steps' path with --compile)
  first step s  the first warm-up step alone: with --compile, torch.compile's tracing and code generation

bf16 is autocast on CUDA only (as `train.bf16`); on the CPU its settings are skipped, and the output says so.

  PYTHONPATH=. python bench/gpu_step.py                                    # a GPU: every setting (minutes)
  PYTHONPATH=. python bench/gpu_step.py --device cpu --steps 4 --warmup 1  # the CPU
  PYTHONPATH=. python bench/gpu_step.py --compile                          # train.compile: true
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F

from embinit.models.config import heads_for
from embinit.data.vocab import BOS, EOS
from embinit.models import Classifier, ModelConfig, Translator
from embinit.training.batching import batch_sampler, load_dataset
from embinit.training.device import autocast, step_policy
from embinit.training.epoch import adam, compile_loss, train_epoch
from train_throughput import MAX_LEN, N_SRC, N_TGT, synthetic_pairs, xavier

N_SST2 = 13439
ADAM = {"adam_betas": [0.9, 0.98], "adam_eps": 1e-9}
HEADS = {"heads": 8, "heads_by_dim": {300: 10, 50: 10}}  # config.yaml's `model`
MODELS = {  # name: task kind, batch size and learning rate of its block in config.yaml
    "translator": ("translation", 64, 2e-4),
    "classifier": ("classification", 128, 1e-4),
}


def synthetic_sentences(path: Path, n: int, seed: int) -> None:
    """SST-2-like examples: ~9 words (gamma, clipped to 1..52), Zipf-distributed word ids, labels 0 / 1; written in
    the tokenized Parquet layout (ids, label)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.gamma(3, 3, n)), 1, 52).astype(int)
    ids = [[BOS, *(4 + (rng.zipf(1.3, k) - 1) % (N_SST2 - 4)).tolist(), EOS] for k in lengths]
    labels = rng.integers(0, 2, n)
    pq.write_table(pa.table({"ids": pa.array(ids, pa.list_(pa.int32())), "label": pa.array(labels, pa.int64())}), path)


def build(name: str, dim: int) -> Translator | Classifier:
    config = ModelConfig(heads=heads_for(HEADS, dim))
    if name == "translator":
        return Translator(xavier(N_SRC, dim), xavier(N_TGT, dim), config)
    return Classifier(xavier(N_SST2, dim), 2, config)


def draw_batches(data, batch_size: int, count: int, seed: int) -> list[np.ndarray]:
    """`count` random batches (the recipe's `train.batching: random`), over as many epochs as it takes."""
    sampler = batch_sampler("random", data.lengths(), batch_size, 4, torch.Generator().manual_seed(seed))
    return list(itertools.islice(itertools.chain.from_iterable(itertools.repeat(sampler)), count))


def wait_for(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loss_seconds(model, data, batches, device: torch.device, bf16: bool, dim: int, compiled: bool) -> float:
    """Seconds of the loss alone over `batches`: the translator's output loss on decoder states of each batch's
    shape, the classifier's Linear(D, 2) and cross-entropy on pooled states (the time does not depend on the
    values, which are random)."""
    policy, heads = step_policy(device, compiled), []
    for indices in batches:
        _, targets = policy.to_device(data.batch(indices), device)
        if isinstance(model, Translator):
            gold = targets[:, 1:]
            states = torch.randn(*gold.shape, dim, device=device, requires_grad=True)
            heads.append(lambda s=states, g=gold: model.output_loss(s, g, policy.fused_loss))
        else:
            pooled = torch.randn(len(targets), dim, device=device, requires_grad=True)
            heads.append(lambda p=pooled, y=targets: F.cross_entropy(model.output(p).float(), y, reduction="sum"))
    wait_for(device)
    began = time.perf_counter()
    for head in heads:
        with autocast(device, bf16):
            loss = head()
        loss.backward()
    wait_for(device)
    return time.perf_counter() - began


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: the peak resident set starts again from the current


def peak_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 2**10  # kB


def worker(connection, barrier, device_name: str, threads: int, data_paths: dict, args: dict) -> None:
    """One run of a setting: its own model on the shared device, trained on the setting's batches; per request
    (model name, bf16) it sends back its timings."""
    torch.set_num_threads(threads)
    device = torch.device(device_name)
    while (request := connection.recv()) is not None:
        name, bf16 = request
        kind, batch_size, lr = MODELS[name]
        torch.manual_seed(args["seed"])
        data = load_dataset(kind, data_paths[name], MAX_LEN)
        batches = draw_batches(data, batch_size, args["warmup"] + args["steps"], args["seed"])
        warmup, timed = batches[: args["warmup"]], batches[args["warmup"] :]
        model = build(name, args["dim"]).to(device)
        optimizer = adam(model, lr, ADAM)
        compiled = compile_loss(model) if args["compile"] else None
        first = time.monotonic()
        train_epoch(
            model, optimizer, data, warmup[:1], device, bf16, compiled_loss=compiled
        )  # compiles, with --compile
        first_step = time.monotonic() - first
        if warmup[1:]:
            train_epoch(model, optimizer, data, warmup[1:], device, bf16, compiled_loss=compiled)
        wait_for(device)
        reset_peak(device)
        barrier.wait(timeout=600)
        began = time.monotonic()  # one clock for every process of the machine
        _, tokens = train_epoch(
            model, optimizer, data, timed, device, bf16, compiled_loss=compiled
        )  # ends reading the loss
        ended = time.monotonic()
        peak = peak_mib(device)
        barrier.wait(timeout=600)
        loss = loss_seconds(model, data, timed, device, bf16, args["dim"], args["compile"])
        connection.send(
            {
                "began": began,
                "ended": ended,
                "tokens": tokens,
                "peak_mib": peak,
                "loss_seconds": loss,
                "first_step_seconds": first_step,
            }
        )


class Team:
    """k worker processes on one device; `run` trains one setting on all of them at once."""

    def __init__(self, k: int, device: torch.device, threads: int, data_paths: dict, args: dict):
        context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
        self.barrier = context.Barrier(k)  # held here: the workers unpickle it after this returns
        self.steps = args["steps"]
        self.connections, self.workers = [], []
        for _ in range(k):
            parent, child = context.Pipe()
            process = context.Process(target=worker, args=(child, self.barrier, str(device), threads, data_paths, args))
            process.start()
            child.close()  # the worker's end: a worker that dies then ends `recv` here with an error
            self.connections.append(parent)
            self.workers.append(process)

    def run(self, name: str, bf16: bool) -> dict:
        for connection in self.connections:
            connection.send((name, bf16))
        try:
            runs = [connection.recv() for connection in self.connections]
        except (EOFError, ConnectionError):
            raise RuntimeError(f"a worker of {name} (bf16={bf16}) died: its error is above") from None
        seconds = [r["ended"] - r["began"] for r in runs]
        return {
            "steps_per_second": float(np.mean([self.steps / s for s in seconds])),
            "tokens_per_second": sum(r["tokens"] for r in runs)
            / (max(r["ended"] for r in runs) - min(r["began"] for r in runs)),
            "peak_mib": max(r["peak_mib"] for r in runs),
            "loss_share": float(np.mean([r["loss_seconds"] / s for r, s in zip(runs, seconds)])),
            "first_step_seconds": max(r["first_step_seconds"] for r in runs),
        }

    def close(self) -> None:
        for connection in self.connections:
            with contextlib.suppress(OSError):  # a worker that died has closed its end
                connection.send(None)
        for process in self.workers:
            process.join(timeout=60)
            if process.is_alive():  # left waiting at the barrier for a worker that died
                process.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto (cuda when torch has it, else cpu), cpu or cuda")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--runs", nargs="+", type=int, default=[1, 4], help="runs sharing the device, per setting")
    parser.add_argument("--dim", type=int, default=300, help="D (GloVe 840B: 300)")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--sentences", type=int, default=4096, help="synthetic examples per dataset")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads of all runs together; 0: torch's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compile", action="store_true", help="train.compile: the steps' loss compiled by torch.compile"
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.warmup < 1:
        parser.error(
            "--warmup must be at least 1: the first warm-up step is timed on its own (the compile, with --compile)"
        )
    os.environ["TQDM_DISABLE"] = "1"  # the loop's progress bars, in every worker
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    threads = args.threads or torch.get_num_threads()
    precisions = args.precisions
    if device.type != "cuda" and "bf16" in precisions:
        print("bf16: skipped on the CPU (runs autocast to bf16 only on CUDA, train.bf16)")
        precisions = [p for p in precisions if p != "bf16"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {threads} threads in all"
    print(f"device: {device} ({name}); torch {torch.__version__}; D = {args.dim}; synthetic data, seed {args.seed}")
    print(f"steps: {'torch.compile (train.compile: true)' if args.compile else 'eager'}")
    print(
        f"{args.steps} timed steps per run after {args.warmup} warm-up steps; batches: "
        + ", ".join(f"{m} {MODELS[m][1]}" for m in args.models)
    )

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        paths = {"translator": Path(scratch) / "multi30k.parquet", "classifier": Path(scratch) / "sst2.parquet"}
        synthetic_pairs(paths["translator"], args.sentences, args.seed)
        synthetic_sentences(paths["classifier"], args.sentences, args.seed)
        settings = {
            "steps": args.steps,
            "warmup": args.warmup,
            "dim": args.dim,
            "seed": args.seed,
            "compile": args.compile,
        }
        for k, model, precision in itertools.product(args.runs, args.models, precisions):
            # fresh workers for each setting: no memory, allocator pool or warm cache carried over from another
            team = Team(k, device, max(1, threads // k), {m: str(p) for m, p in paths.items()}, settings)
            try:
                rows.append({"model": model, "precision": precision, "runs": k} | team.run(model, precision == "bf16"))
            finally:
                team.close()
    print(
        "\n| model | precision | runs | steps/s per run | tokens/s, all runs | peak MiB per run | loss % | first step s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['precision']} | {r['runs']} | {r['steps_per_second']:.2f} | "
            f"{r['tokens_per_second']:,.0f} | {r['peak_mib']:,.0f} | {100 * r['loss_share']:.0f} | "
            f"{r['first_step_seconds']:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"device": str(device), "name": name, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
