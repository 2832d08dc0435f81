"""The pre-trained matrix aligned with a vocabulary: row i = the source's vector for vocabulary row i.

The source's file is read by its format's reader, or by its `word_rows` policy (embinit.layers.readers); rows the
source lacks (unknown words, word-level specials, null lm_id) are filled by a missing-row policy
(embinit.layers.missing). The sidecar records what filled each row (column `filled`) and embinit.reports.matches
counts them.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from embinit.io import atomic_path
from embinit.layers.missing import fill_counts, fill_missing
from embinit.layers.readers import READERS, WORD_ROWS

log = logging.getLogger(__name__)

META_MISSING, META_MISSING_PARAMS = b"embinit.missing", b"embinit.missing_params"  # the sidecar's file metadata


def _read_vocab(path: str) -> pd.DataFrame:
    vocab = pd.read_parquet(path, columns=["index", "token", "special", "lm_id"], dtype_backend="numpy_nullable")
    if not (vocab["index"].to_numpy(dtype=np.int64) == np.arange(len(vocab))).all():
        raise ValueError(f"{path}: column index must be 0..N-1 in row order")
    return vocab


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
    embinit.layers.missing.MISSING_POLICIES entry that fills the rows the source lacks, with `missing_params` (config
    `embeddings.missing_params`). The sidecar's `filled` column says what gave each row (`fill_missing`), and its
    file metadata holds the policy (`embinit.missing`) and its parameters (`embinit.missing_params`, JSON).
    Returns the match report: n, dim, matched, missing, pct (matched, % of all N rows, specials included),
    filled_by (the policy) and the missing rows' `fill_counts`; for a source with `word_rows` (a word vocabulary
    from a sub-word source, embinit.layers.readers.WORD_ROWS) also word_rows, one_piece and several_pieces (the
    matched rows that are one source row, and the means of two or more).
    """
    missing_params = dict(missing_params or {})
    fmt = source_cfg["format"]
    if fmt not in READERS:
        raise ValueError(f"unknown source format {fmt!r}; allowed: {', '.join(READERS)}")
    vocab = _read_vocab(vocab_path)
    dim = int(source_cfg["dim"])
    word_rows = source_cfg.get("word_rows")
    if word_rows:
        if word_rows not in WORD_ROWS:
            raise ValueError(f"unknown source word_rows {word_rows!r}; allowed: {', '.join(WORD_ROWS)}")
        matrix, pieces = WORD_ROWS[word_rows](vocab, files, dim)
        matched = pieces > 0
    else:
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
    if word_rows:  # the matched rows by how many of the source's rows each averages
        report |= {
            "word_rows": word_rows,
            "one_piece": int((pieces == 1).sum()),
            "several_pieces": int((pieces > 1).sum()),
        }
    log.info("%s (%s): %s", out_npy, fmt, report)
    return report
