"""Training throughput of this pipeline's loop against a naive loop, on the Multi30k GloVe-sized translator.

(a) pipeline: embinit.training.epoch.train_epoch on length-bucketed batches (embinit.training.batching), the SDPA model of
    embinit.models, bf16 autocast on CUDA;
(b) naive: random batches padded to the batch maximum, fp32, torch.nn.Transformer of the same sizes.
Both: D = 300, 10 heads, FFN 512, 3 + 3 layers, vocabularies 7853 (de) / 5893 (en), batch 64, Adam.
Throughput = real (non-pad) source + target tokens per second of training steps, after warm-up steps.

  python bench/train_throughput.py --steps 30 [--data data/tokenized/multi30k/spacy] [--device cpu] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn as nn
import torch.nn.functional as F

from embinit.training.batching import BucketBatchSampler, TranslationData
from embinit.layers.position_table import sinusoidal_table
from embinit.models import ModelConfig, Translator
from embinit.training.device import pick_device
from embinit.training.epoch import train_epoch
from embinit.data.vocab import BOS, EOS, PAD

N_SRC, N_TGT, DIM, HEADS, FFN, LAYERS, BATCH = 7853, 5893, 300, 10, 512, 3, 64
MAX_LEN = 256


def synthetic_pairs(path: Path, n: int, seed: int) -> None:
    """Multi30k-like sentences: ~13 words (gamma, clipped to 4..44), target length close to the source's,
    Zipf-distributed word ids; written in the tokenized Parquet format (ids only)."""
    rng = np.random.default_rng(seed)
    src_len = np.clip(np.rint(rng.gamma(10, 1.3, n)), 4, 44).astype(int)
    tgt_len = np.clip(np.rint(src_len * rng.uniform(0.8, 1.25, n)), 4, 44).astype(int)

    def words(length, vocab):
        return (4 + (rng.zipf(1.3, length) - 1) % (vocab - 4)).tolist()

    ids = pa.list_(pa.int32())
    tgt = [words(k, N_TGT) for k in tgt_len]
    pq.write_table(
        pa.table(
            {
                "src_ids": pa.array([[BOS, *words(k, N_SRC), EOS] for k in src_len], ids),
                "tgt_ids": pa.array([[BOS, *t, EOS] for t in tgt], ids),
            }
        ),
        path,
    )


def xavier(n: int, dim: int) -> np.ndarray:
    return nn.init.xavier_uniform_(torch.empty(n, dim)).numpy()


class NaiveTranslator(nn.Module):
    """The textbook recipe: nn.Transformer between scaled embeddings + sinusoids and a Linear output."""

    def __init__(self):
        super().__init__()
        self.src_embedding = nn.Embedding(N_SRC, DIM)
        self.tgt_embedding = nn.Embedding(N_TGT, DIM)
        self.register_buffer("positions", torch.from_numpy(sinusoidal_table(MAX_LEN, DIM)))
        self.dropout = nn.Dropout(0.1)
        self.transformer = nn.Transformer(DIM, HEADS, LAYERS, LAYERS, FFN, dropout=0.1, batch_first=True)
        self.generator = nn.Linear(DIM, N_TGT)

    def embed(self, embedding: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(embedding(ids) * math.sqrt(DIM) + self.positions[: ids.size(1)])

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)
        out = self.transformer(
            self.embed(self.src_embedding, src),
            self.embed(self.tgt_embedding, tgt),
            tgt_mask=causal,
            src_key_padding_mask=src == PAD,
            tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD,
        )
        return self.generator(out)


def naive_steps(model, optimizer, data, batches, device) -> int:
    """Plain fp32 training steps; returns the real tokens seen."""
    model.train()
    tokens = 0
    for indices in batches:
        src, tgt = (t.to(device) for t in data.batch(indices))
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        tokens += int((src != PAD).sum() + (tgt != PAD).sum())
    return tokens


def padding_share(data, batches) -> float:
    lengths = data.lengths()
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(int((lengths[b].max(0) * len(b)).sum()) for b in batches)
    return (padded - real) / padded


def timed(run, chunk, device) -> tuple[int, float]:
    """(tokens, seconds) of run(chunk), GPU work included."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    tokens = run(chunk)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return tokens, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="tokenized Multi30k folder (holds train.parquet); default: synthetic")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, alternating the two loops")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    gpu_slot = contextlib.ExitStack()  # on a machine with several GPUs, holds this one until the bench exits
    device = pick_device(args.device, gpu_slot)
    torch.manual_seed(args.seed)

    if args.data:
        data, source = TranslationData(Path(args.data) / "train.parquet", MAX_LEN), f"Multi30k train ({args.data})"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            synthetic_pairs(Path(tmp) / "train.parquet", 29000, args.seed)
            data, source = TranslationData(Path(tmp) / "train.parquet", MAX_LEN), "synthetic Multi30k-like"
    n = args.warmup + args.steps

    model = Translator(xavier(N_SRC, DIM), xavier(N_TGT, DIM), ModelConfig(heads=HEADS, ffn_dim=FFN, layers=LAYERS)).to(
        device
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.9, 0.98), eps=1e-9)
    sampler = BucketBatchSampler(data.lengths(), BATCH, 4, torch.Generator().manual_seed(args.seed))
    batches = [b for b, _ in zip(sampler, range(n))]
    bf16 = device.type == "cuda"

    naive_model = NaiveTranslator().to(device)
    naive_optimizer = torch.optim.Adam(naive_model.parameters(), lr=2e-4, betas=(0.9, 0.98), eps=1e-9)
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(args.seed)).numpy()
    random_batches = [order[i * BATCH : (i + 1) * BATCH] for i in range(n)]

    def run_pipeline(chunk):
        return train_epoch(model, optimizer, data, chunk, device, bf16, "pipeline")[1]

    def run_naive(chunk):
        return naive_steps(naive_model, naive_optimizer, data, chunk, device)

    loops = {"pipeline": (run_pipeline, batches), "naive": (run_naive, random_batches)}
    for run, chunks in loops.values():
        run(chunks[: args.warmup])
    # Alternate the two loops in rounds, so a busy machine slows both alike.
    tokens, seconds = dict.fromkeys(loops, 0), dict.fromkeys(loops, 0.0)
    bounds = np.linspace(args.warmup, n, args.rounds + 1).astype(int)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        for name, (run, chunks) in loops.items():
            t, s = timed(run, chunks[start:stop], device)
            tokens[name] += t
            seconds[name] += s
    rate = {name: tokens[name] / seconds[name] for name in loops}
    padding = {name: padding_share(data, chunks[args.warmup :]) for name, (_, chunks) in loops.items()}

    print(f"data: {source}; device: {device}, {torch.get_num_threads()} threads; torch {torch.__version__}")
    print(
        f"{args.steps} steps per loop, timed in {args.rounds} alternating rounds after {args.warmup} "
        f"warm-up steps; batch {BATCH}"
    )
    print(
        f"pipeline (bucketed, SDPA{', bf16' if bf16 else ''}): {rate['pipeline']:7.0f} tokens/s, "
        f"padding {padding['pipeline']:.1%}"
    )
    print(
        f"naive (random batches, nn.Transformer, fp32): {rate['naive']:7.0f} tokens/s, padding {padding['naive']:.1%}"
    )
    print(f"ratio: {rate['pipeline'] / rate['naive']:.2f}x")


if __name__ == "__main__":
    main()
