"""What the recipe's random batches cost per epoch against length buckets (train.batching), in one process.

Both train the paper-scale translator (D = 300, 10 heads, FFN 512, 3 + 3 layers, the recipe's init, batch 64, Adam
2e-4) on the same tokenized Multi30k train split; rounds alternate random / random packed / bucketed, each `--steps` Adam steps on
the next batches of its sampler, so a slower or busier CPU slows both alike. Also the padding each way over one full
epoch: pad tokens per real token, source and target together.
The last lines are `packed ratio: X`, packed random batches' seconds per epoch over bucketed's (`train.packed`: the
position-wise layers on the real tokens only), and `ratio: X`, padded random batches' over bucketed's.

  python bench/batching.py [--data data/tokenized/multi30k/spacy/train.parquet] [--rounds 4] [--steps 10] [--threads 1]
      [--dim 300]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from embinit.models import ModelConfig, Translator
from embinit.training.batching import TranslationData, batch_sampler
from embinit.training.epoch import adam, train_epoch

DIM, HEADS, BATCH = 300, 10, 64
TRAIN = {"adam_betas": [0.9, 0.98], "adam_eps": 1e-9}
# (name, train.batching, train.packed): the recipe's random batches padded and packed, against length buckets
ARMS = [("random", "random", False), ("random, packed", "random", True), ("bucketed", "bucketed", False)]


def padding(lengths: np.ndarray, batches) -> float:
    """Pad tokens per real token over these batches, both columns."""
    return sum((lengths[b].max(0) * len(b) - lengths[b].sum(0)).sum() for b in batches) / lengths.sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/tokenized/multi30k/spacy/train.parquet")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dim", type=int, default=DIM, help="D (10 heads either way, as config.yaml's heads_by_dim)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = TranslationData(args.data, 256)
    lengths = data.lengths()
    n_src = int(max(s.max() for s in data.src)) + 1
    n_tgt = int(max(t.max() for t in data.tgt)) + 1
    samplers, runs = {}, {}
    for name, batching, packed in ARMS:
        samplers[name] = batch_sampler(batching, lengths, BATCH, 4, torch.Generator().manual_seed(0))
        print(f"{name}: {padding(lengths, list(samplers[name])):.3f} pad tokens per real token over an epoch")
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        embeddings = [rng.uniform(-0.03, 0.03, (n, args.dim)).astype(np.float32) for n in (n_src, n_tgt)]
        model = Translator(*embeddings, ModelConfig(heads=HEADS))
        runs[name] = (model, adam(model, 2e-4, TRAIN), iter(samplers[name]), packed)
    seconds = {name: 0.0 for name in runs}
    for _ in range(args.rounds):
        for name, (model, optimizer, batches, packed) in runs.items():
            chunk = [next(batches) for _ in range(args.steps)]
            start = time.perf_counter()
            train_epoch(model, optimizer, data, chunk, torch.device("cpu"), False, packed=packed)
            seconds[name] += time.perf_counter() - start
    steps = args.rounds * args.steps
    per_epoch = {name: seconds[name] / steps * len(samplers[name]) / 60 for name in runs}
    for name in runs:
        print(f"{name}: {seconds[name] / steps:.3f} s per step, {per_epoch[name]:.1f} min per epoch ({steps} steps)")
    print(f"packed ratio: {per_epoch['random, packed'] / per_epoch['bucketed']:.2f}")
    print(f"ratio: {per_epoch['random'] / per_epoch['bucketed']:.2f}")


if __name__ == "__main__":
    main()
