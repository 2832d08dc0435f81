"""Missing-row policies: what fills the vocabulary rows a pre-trained source lacks (config `embeddings.missing`).

Built in: `mean_std`, `zeros`, `xavier`, `neighbors`; an extension file adds one with `register_missing`. Each
draws from a generator seeded by config `embeddings.missing_seed`, so `Pretrained` is the same matrix for every
run seed; `fill_missing` records what filled each row (the sidecar's `filled` column).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Callable, Literal, Sequence

import numpy as np
import pandas as pd

from embinit.layers.initializers import mean_std, xavier_bound
from embinit.registry import AtLeast, Registry


@dataclass(frozen=True)
class MissingContext:
    """What a missing-row policy may read: the vocabulary, which rows the source gave, and the seeded generator.

    `matrix` is N x D with the source's rows where `matched` is true (zeros elsewhere); `rng` is seeded by config
    `embeddings.missing_seed`, so the filled rows are the same for every run seed.
    """

    tokens: list[str]
    special: np.ndarray
    matched: np.ndarray
    matrix: np.ndarray
    rng: np.random.Generator

    @property
    def matched_rows(self) -> np.ndarray:
        return self.matrix[self.matched]

    @property
    def missing_index(self) -> np.ndarray:
        """Vocabulary rows to fill, ascending: the order of the rows a policy returns."""
        return np.flatnonzero(~self.matched)

    @property
    def n_missing(self) -> int:
        return int((~self.matched).sum())

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.matrix.shape)


MissingPolicy = Callable[..., "np.ndarray | tuple[np.ndarray, Sequence[str]]"]
MISSING_POLICIES: Registry = Registry("missing-row policy")


# Verbatim: its text enters every missing-row policy's fingerprint (embinit.fingerprints): an edit reruns every
# extraction, layer and run.
def register_missing(name: str) -> Callable[[MissingPolicy], MissingPolicy]:
    """Add a missing-row policy, selected by config `embeddings.missing: <name>`.

    A policy is `fn(ctx: MissingContext, **params)`; `params` are its entry of config `embeddings.missing_params` (checked by
    embinit.checks.check against the parameters after `ctx`, as for initializers). It returns the
    `ctx.n_missing` x D rows for `ctx.missing_index`, in that order, or `(rows, labels)` where `labels[j]` names
    what filled row j (recorded in the sidecar's `filled` column; default: the policy's name).
    """

    def add(fn: MissingPolicy) -> MissingPolicy:
        MISSING_POLICIES[name] = fn
        return fn

    return add


@register_missing("mean_std")
def _mean_std(ctx: MissingContext):
    """Normal draws with the mean and std of all matched entries."""
    mean, std = mean_std(ctx.matched_rows)
    return ctx.rng.normal(mean, std, size=(ctx.n_missing, ctx.shape[1]))


@register_missing("zeros")
def _zeros(ctx: MissingContext):
    return np.zeros((ctx.n_missing, ctx.shape[1]))


@register_missing("xavier")
def _xavier(ctx: MissingContext):
    """Uniform draws within Xavier's bound for the full N x D matrix."""
    a = xavier_bound(*ctx.shape)
    return ctx.rng.uniform(-a, a, size=(ctx.n_missing, ctx.shape[1]))


def char_ngrams(word: str, n: int) -> set[str]:
    """The character n-grams of `<word>` (lowercased, with boundary markers); the whole `<word>` if shorter."""
    marked = f"<{word.lower()}>"
    if len(marked) <= n:
        return {marked}
    return {marked[i : i + n] for i in range(len(marked) - n + 1)}


class NgramIndex:
    """An inverted index from character n-gram to the words that contain it, for similarity look-ups."""

    def __init__(self, words: Sequence[str], n: int):
        self.n = n
        self.gram_ids: dict[str, int] = {}
        pairs_gram, pairs_word, sizes = [], [], []
        for w, word in enumerate(words):
            grams = char_ngrams(word, n)
            sizes.append(len(grams))
            for g in grams:
                pairs_gram.append(self.gram_ids.setdefault(g, len(self.gram_ids)))
                pairs_word.append(w)
        gram = np.asarray(pairs_gram, dtype=np.int64)
        word = np.asarray(pairs_word, dtype=np.int64)
        order = np.argsort(gram, kind="stable")
        self.postings = word[order]  # the words of gram g: postings[starts[g] : starts[g + 1]]
        self.starts = np.searchsorted(gram[order], np.arange(len(self.gram_ids) + 1))
        self.sizes = np.asarray(sizes, dtype=np.int64)

    def nearest(self, word: str, k: int, similarity: str) -> tuple[np.ndarray, np.ndarray]:
        """The (at most) k indexed words sharing the most n-grams with `word`, and their similarities (> 0).

        Similarity is `jaccard` (shared / union of the two n-gram sets) or `overlap` (the shared count); ties go
        to the earlier word.
        """
        grams = char_ngrams(word, self.n)
        ids = [self.gram_ids[g] for g in grams if g in self.gram_ids]
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        candidates, shared = np.unique(
            np.concatenate([self.postings[self.starts[g] : self.starts[g + 1]] for g in ids]), return_counts=True
        )
        if similarity == "jaccard":
            score = shared / (len(grams) + self.sizes[candidates] - shared)
        elif similarity == "overlap":
            score = shared.astype(np.float64)
        else:
            raise ValueError(f"neighbors: unknown similarity {similarity!r}; allowed: jaccard, overlap")
        best = np.lexsort((candidates, -score))[:k]
        return candidates[best], score[best]


@register_missing("neighbors")
def _neighbors(
    ctx: MissingContext,
    k: Annotated[int, AtLeast(1)] = 10,
    n: Annotated[int, AtLeast(2)] = 3,
    similarity: Literal["jaccard", "overlap"] = "jaccard",
):
    """Each missing word: the similarity-weighted mean of the k matched words sharing the most character n-grams.

    In the spirit of FOCUS and WECHSEL (new tokens from similar known ones). A word's n-grams are those of
    `<word>` (lowercased, `<` and `>` marking its start and end; the whole `<word>` when it is shorter than n), as
    a set. Candidates are the matched non-special vocabulary words, found through an inverted index from n-gram
    to word; similarity is `jaccard` (shared / union of the n-gram sets) or `overlap` (shared count); the top k
    (ties: the earlier vocabulary row, i.e. the more frequent word) are averaged with weights proportional to
    their similarity. A missing word that shares no n-gram with any matched word, and every special token,
    keeps the `mean_std` policy's draw for its row: the whole `mean_std` draw is made first with the same
    generator, so those rows are exactly what `embeddings.missing: mean_std` gives them.
    Labels: `neighbors`, or `mean_std` for a row that fell back.
    """
    if k < 1 or n < 2:
        raise ValueError(f"neighbors: k must be >= 1 and n >= 2, got k={k}, n={n}")
    rows = np.asarray(_mean_std(ctx), dtype=np.float64)
    labels = ["mean_std"] * len(rows)
    known = np.flatnonzero(ctx.matched & ~ctx.special)
    if known.size == 0:
        return rows, labels
    index = NgramIndex([ctx.tokens[i] for i in known], n)
    vectors = ctx.matrix[known].astype(np.float64)
    for j, i in enumerate(ctx.missing_index):
        if ctx.special[i]:
            continue
        words, score = index.nearest(ctx.tokens[i], k, similarity)
        if words.size:
            rows[j] = (score / score.sum()) @ vectors[words]
            labels[j] = "neighbors"
    return rows, labels


FILLED_MATCHED, FILLED_SPECIAL = "matched", "special"


def fill_missing(
    vocab: pd.DataFrame, matrix: np.ndarray, matched: np.ndarray, missing: str, missing_seed: int, params: dict
) -> np.ndarray:
    """Fill the rows of `matrix` the source lacks, in place, with policy `missing`; return each row's `filled`.

    `filled[i]` is `matched`, `special` (a special token the source lacks, filled by the policy: its own draw, or
    its fallback for `neighbors`), or the label the policy gave the row (its name, or e.g. `mean_std` for a
    `neighbors` row that fell back).
    """
    fn = MISSING_POLICIES.lookup(missing)
    special = vocab["special"].to_numpy(dtype=bool)
    ctx = MissingContext(
        vocab["token"].astype(str).tolist(), special, matched, matrix, np.random.default_rng(missing_seed)
    )
    missing_index = ctx.missing_index
    result = fn(ctx, **params)
    rows, labels = result if isinstance(result, tuple) else (result, [missing] * len(missing_index))
    rows = np.asarray(rows)
    if rows.shape != (len(missing_index), matrix.shape[1]) or len(labels) != len(missing_index):
        raise ValueError(
            f"missing-row policy {missing!r} returned {rows.shape} rows and {len(labels)} labels; "
            f"expected ({len(missing_index)}, {matrix.shape[1]}) and {len(missing_index)}"
        )
    matrix[missing_index] = rows
    filled = np.full(len(vocab), FILLED_MATCHED, dtype=object)
    filled[missing_index] = [str(x) for x in labels]
    filled[~matched & special] = FILLED_SPECIAL
    return filled


def fill_counts(missing: str, filled) -> dict:
    """Missing rows by what filled them: `by_policy` (the policy itself), `fallback` (something else, e.g. the
    `mean_std` fallback of `neighbors`), `special` (special tokens)."""
    filled = pd.Series(filled, dtype=object)
    special = int((filled == FILLED_SPECIAL).sum())
    by_policy = int((filled == missing).sum())
    return {
        "by_policy": by_policy,
        "fallback": int((filled != FILLED_MATCHED).sum()) - special - by_policy,
        "special": special,
    }
