"""Greedy validation decoding: Translator.generate (key/value cache) against the uncached decoder it replaced.

Both decode the same sentences with the same untrained D-dim translator (Multi30k vocabulary sizes; an
untrained model rarely says <eos>, so every sentence runs to its length limit: the worst case, and the
common one in early epochs). Rounds alternate old / new in one process; the outputs must be identical (where
fp32 rounding flips a near-tie of the untrained logits, in float64).
The last line is `ratio: X`, new speed over old.

  python bench/decode.py [--quick] [--dim 300] [--data data/tokenized/multi30k/spacy] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from embinit.training.batching import TranslationData, sorted_batches
from embinit.models import ModelConfig, Translator
from embinit.data.vocab import BOS, EOS, PAD
from train_throughput import N_SRC, N_TGT, synthetic_pairs, xavier


@torch.no_grad()
def uncached_generate(model: Translator, src: torch.Tensor, max_extra: int) -> torch.Tensor:
    """The decoder before the cache: every step reruns the whole prefix through every decoder layer."""
    memory, keep = model.encode(src)
    limits = (src != PAD).sum(1) + max_extra
    out = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for step in range(1, min(int(limits.max()), model.max_len - 1) + 1):
        token = model.output(model.decode(out, memory, keep)[:, -1]).argmax(-1).masked_fill(done, PAD)
        out = torch.cat([out, token[:, None]], dim=1)
        done |= (token == EOS) | (step >= limits)
        if done.all():
            break
    return out[:, 1:]


def decode_all(generate, model, data, batch_size, max_extra) -> tuple[list[list[int]], float]:
    began = time.perf_counter()
    outputs = []
    for indices in sorted_batches(data.lengths(), batch_size):
        src, _ = data.batch(indices)
        outputs += generate(model, src, max_extra).tolist()
    return outputs, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="48 sentences, one round each (under 2 minutes on 2 cores)"
    )
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--data", default="data/tokenized/multi30k/spacy")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-extra", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    valid = Path(args.data) / "valid.parquet"
    if valid.exists():
        data, origin = TranslationData(valid, max_len=256), f"real Multi30k {valid}"
    else:
        path = Path(tempfile.mkdtemp()) / "valid.parquet"
        synthetic_pairs(path, 1014, seed=1)
        data, origin = TranslationData(path, max_len=256), "synthetic Multi30k-like pairs"
    if args.quick:
        data.src, data.tgt = data.src[:48], data.tgt[:48]
    model = Translator(xavier(N_SRC, args.dim), xavier(N_TGT, args.dim), ModelConfig(heads=10)).eval()
    print(f"{len(data.src)} sentences ({origin}), D = {args.dim}, {torch.get_num_threads()} threads")

    seconds = {"old": [], "new": []}
    outputs = {}
    for _ in range(1 if args.quick else 2):
        for name, generate in (("old", uncached_generate), ("new", Translator.generate)):
            outputs[name], took = decode_all(generate, model, data, args.batch_size, args.max_extra)
            seconds[name].append(took)
            print(f"{name}: {took:.2f} s ({sum(map(len, outputs[name])) / took:,.0f} generated tokens/s)")
    differ = [i for i, (a, b) in enumerate(zip(outputs["old"], outputs["new"])) if a != b]
    if differ:
        # An untrained model's logits nearly tie, so fp32 rounding (other matrix shapes) can flip an argmax.
        # Exact logic gives the same ids in float64 too; a wrong cache would not.
        data.src, data.tgt = [data.src[i] for i in differ], [data.tgt[i] for i in differ]
        exact = {
            name: decode_all(generate, model.double(), data, args.batch_size, args.max_extra)[0]
            for name, generate in (("old", uncached_generate), ("new", Translator.generate))
        }
        if exact["old"] != exact["new"]:
            raise SystemExit("outputs differ in float64 too: the cached decoder is wrong")
        print(
            f"outputs identical but for {len(differ)} of {len(outputs['old'])} sentences, where fp32 rounding "
            "flips a near-tie; those are identical in float64"
        )
    else:
        print("outputs identical")
    print(f"ratio: {np.median(seconds['old']) / np.median(seconds['new']):.2f}")


if __name__ == "__main__":
    main()
