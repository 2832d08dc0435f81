"""The layers the runs start from, out to other training code (output `layer_export`): per block, one safetensors file
per (initializer, seed) holding each side's N x D layer exactly as its .npy, each side's vocabulary in row order, and
the block's tokenizer file where it has one (a sub-word block), so row i of a layer is the vector of token i."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from safetensors.numpy import save_file

VOCAB_COLUMNS = ["token", "special", "lm_id"]


def _vocabulary(path) -> dict:
    """A side's vocabulary as JSON: tokens in row order, which are specials, and each token's id in the source LM
    (sub-word blocks; null for word-level ones)."""
    vocab = pd.read_parquet(path).sort_values("index")
    if not (vocab["index"].to_numpy() == np.arange(len(vocab))).all():
        raise ValueError(f"{path}: vocabulary indices are not 0..{len(vocab) - 1}")
    lm_ids = [None if pd.isna(i) else int(i) for i in vocab.lm_id]
    return {"tokens": vocab.token.tolist(), "special": vocab.special.astype(bool).tolist(), "lm_ids": lm_ids}


def export_layers(layers: pd.DataFrame, folder) -> pd.DataFrame:
    """Write `folder`/<block>/<initializer>/seed<k>.safetensors (a tensor per side, named by the side; the run's
    block, initializer, seed and vocabulary files in its metadata), <block>/vocab_<side>.json and the tokenizer file,
    from the layer-sheet rows `layers` (files layer, vocab, tokenizer); returns one row per exported tensor."""
    folder, rows = Path(folder), []
    for block, part in layers.groupby("block", sort=False):
        out = folder / block
        out.mkdir(parents=True, exist_ok=True)
        vocab_files, sizes = {}, {}
        for row in part[part.file == "vocab"].itertuples():
            vocab = _vocabulary(row.path)
            vocab_files[row.side], sizes[row.side] = f"vocab_{row.side}.json", len(vocab["tokens"])
            (out / vocab_files[row.side]).write_text(json.dumps(vocab, ensure_ascii=False) + "\n", encoding="utf-8")
        tokenizers = part.path[part.file == "tokenizer"].tolist()
        for path in tokenizers:
            shutil.copyfile(path, out / Path(path).name)
        started = part[part.file == "layer"]
        for (init, seed), sides in started.groupby(["initializer", "seed"], sort=False):
            tensors = {row.side: np.load(row.path) for row in sides.itertuples()}
            for side, tensor in tensors.items():
                if tensor.shape[0] != sizes[side]:
                    raise ValueError(
                        f"{block} {init} seed {seed}: {side} layer has {tensor.shape[0]} rows, its "
                        f"vocabulary {sizes[side]}"
                    )
            metadata = {
                "block": block,
                "task": part.task.iloc[0],
                "initializer": init,
                "seed": str(seed),
                "sources": json.dumps({r.side: None if pd.isna(r.source) else r.source for r in sides.itertuples()}),
                "vocabularies": json.dumps({side: vocab_files[side] for side in tensors}),
                "tokenizer": Path(tokenizers[0]).name if tokenizers else "spacy (word level, lowercased)",
            }
            target = out / init / f"seed{seed}.safetensors"
            target.parent.mkdir(parents=True, exist_ok=True)
            save_file(tensors, target, metadata=metadata)
            rows += [
                {
                    "block": block,
                    "initializer": init,
                    "seed": seed,
                    "side": side,
                    "rows": t.shape[0],
                    "dim": t.shape[1],
                    "file": str(target.relative_to(folder)),
                }
                for side, t in tensors.items()
            ]
    table = pd.DataFrame(rows)
    table.to_csv(folder / "layers.csv", index=False)
    return table
