"""Datasets from the tokenized Parquet files (docs/design.md) and the training batches (`train.batching`).

The batchings are a registry (`register_batching`), as initializers and position encodings are. Built in: `random`
(the paper's recipe: a DataLoader that shuffles): each epoch a seeded permutation cut into batches of `batch_size`,
the last one smaller; `bucketed` (a speed option): batches of sentences of similar length, so little compute goes to
padding. Both draw from a seeded torch.Generator, whose state the training checkpoint saves.
"""

from __future__ import annotations

from typing import Callable, Iterator, Protocol

import numpy as np
import pandas as pd
import torch

from embinit.data.vocab import PAD, SPLIT_LAYOUT, TRANSLATION_COLUMNS
from embinit.registry import BATCHINGS


def truncate(ids: np.ndarray, max_len: int) -> np.ndarray:
    """At most max_len ids; a cut sequence keeps its closing <eos> so it still ends like the others."""
    if len(ids) <= max_len:
        return ids
    return np.concatenate([ids[: max_len - 1], ids[-1:]])


def _id_arrays(column: pd.Series, max_len: int) -> list[np.ndarray]:
    return [truncate(np.asarray(ids, dtype=np.int64), max_len) for ids in column]


def pad(sequences: list[np.ndarray]) -> torch.Tensor:
    """Right-pad with <pad> to the longest sequence: (B, T) int64."""
    out = np.full((len(sequences), max(len(s) for s in sequences)), PAD, dtype=np.int64)
    for row, seq in enumerate(sequences):
        out[row, : len(seq)] = seq
    return torch.from_numpy(out)


class TranslationData:
    """German source ids, English target ids (both <bos> ... <eos>). The BLEU references are files of their
    own (embinit.data.vocab.read_references)."""

    def __init__(self, path: str, max_len: int):
        frame = pd.read_parquet(path)
        if set(frame.columns) != set(TRANSLATION_COLUMNS):
            raise ValueError(
                f"{path}: columns {sorted(frame.columns)}, expected {sorted(TRANSLATION_COLUMNS)} (tokenized-split "
                f"layout {SPLIT_LAYOUT}); a tokenized split of an older layout is rebuilt by the vocab rule of its task"
            )
        self.src = _id_arrays(frame["src_ids"], max_len)
        self.tgt = _id_arrays(frame["tgt_ids"], max_len)

    def __len__(self) -> int:
        return len(self.src)

    def lengths(self) -> np.ndarray:
        """(n, 2): source and target length of each pair."""
        return np.array([[len(s), len(t)] for s, t in zip(self.src, self.tgt)], dtype=np.int64).reshape(-1, 2)

    def batch(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        return pad([self.src[i] for i in indices]), pad([self.tgt[i] for i in indices])


class ClassificationData:
    """Token ids (<bos> a <eos> [b <eos>]) and integer labels."""

    def __init__(self, path: str, max_len: int):
        frame = pd.read_parquet(path)
        self.ids = _id_arrays(frame["ids"], max_len)
        self.labels = frame["label"].to_numpy(dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def lengths(self) -> np.ndarray:
        """(n, 1): length of each example."""
        return np.array([len(s) for s in self.ids], dtype=np.int64).reshape(-1, 1)

    def batch(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        return pad([self.ids[i] for i in indices]), torch.from_numpy(self.labels[indices])


def load_dataset(kind: str, path: str, max_len: int) -> TranslationData | ClassificationData:
    if kind == "translation":
        return TranslationData(path, max_len)
    if kind == "classification":
        return ClassificationData(path, max_len)
    raise ValueError(f"unknown task kind {kind!r}")


class Sampler(Protocol):
    """What a batching gives the training loop: an epoch's batches of example indices per iteration."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[np.ndarray]: ...


Batching = Callable[[np.ndarray, int, int, torch.Generator], Sampler]  # (lengths, batch_size, bucket_width, generator)


def register_batching(name: str) -> Callable[[Batching], Batching]:
    """Add `name` as a `train.batching`: `fn(lengths, batch_size, bucket_width, generator)` -> a Sampler whose
    randomness is `generator`'s alone, since a resumed run restores only that generator's state."""

    def add(fn: Batching) -> Batching:
        BATCHINGS[name] = fn
        return fn

    return add


class RandomBatchSampler:
    """Each epoch: a uniform random permutation cut into batches of `batch_size` (torch's DataLoader with
    shuffle=True); only the last batch of an epoch can be smaller."""

    def __init__(self, size: int, batch_size: int, generator: torch.Generator):
        self.size = size
        self.batch_size = batch_size
        self.generator = generator

    def __len__(self) -> int:
        return -(-self.size // self.batch_size)

    def __iter__(self) -> Iterator[np.ndarray]:
        order = torch.randperm(self.size, generator=self.generator).numpy()
        for i in range(0, self.size, self.batch_size):
            yield order[i : i + self.batch_size]


@register_batching("random")
def random_batches(
    lengths: np.ndarray, batch_size: int, bucket_width: int, generator: torch.Generator
) -> RandomBatchSampler:
    """The recipe's batches: lengths only count the examples, so bucket_width plays no part."""
    return RandomBatchSampler(len(lengths), batch_size, generator)


@register_batching("bucketed")
class BucketBatchSampler:
    """Each epoch: shuffle, stably sort by length bucket (every column of `lengths`, width
    `bucket_width`), cut into batches of `batch_size`, and shuffle the batch order.

    The shuffle before the stable sort randomizes which sentences share a batch within a bucket;
    only the last batch of an epoch can be smaller than batch_size.
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, bucket_width: int, generator: torch.Generator):
        buckets = lengths // bucket_width
        self.keys = np.zeros(len(lengths), dtype=np.int64)
        for column in buckets.T:  # lexicographic key: first column's bucket, then the next one's
            self.keys = self.keys * (int(column.max()) + 1) + column
        self.batch_size = batch_size
        self.generator = generator

    def __len__(self) -> int:
        return -(-len(self.keys) // self.batch_size)

    def __iter__(self) -> Iterator[np.ndarray]:
        order = torch.randperm(len(self.keys), generator=self.generator).numpy()
        order = order[np.argsort(self.keys[order], kind="stable")]
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        for b in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[b]


def batch_sampler(
    batching: str, lengths: np.ndarray, batch_size: int, bucket_width: int, generator: torch.Generator
) -> Sampler:
    """The training batches `train.batching` names, over examples of these `lengths`."""
    return BATCHINGS.lookup(batching)(lengths, batch_size, bucket_width, generator)


def sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Evaluation batches: indices in order of length (first column), so padding stays small."""
    order = np.argsort(lengths[:, 0], kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
