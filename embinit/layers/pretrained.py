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
from embinit.layers.initializers import pretrained_upproject
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


def source_rows(vocab: pd.DataFrame, source_cfg: dict, files: dict[str, str]):
    """(N x D rows, matched, pieces or None): the source's row for each vocabulary entry, by its format's reader or
    its `word_rows` policy (then `pieces[i]` is how many source rows row i averages); a source with `up_project`
    reads its files' `from` columns and maps them to its `dim` (up_projected)."""
    fmt, word_rows, dim = source_cfg["format"], source_cfg.get("word_rows"), int(source_cfg["dim"])
    up = source_cfg.get("up_project")
    read_dim = int(up["from"]) if up else dim
    if fmt not in READERS:
        raise ValueError(f"unknown source format {fmt!r}; allowed: {', '.join(READERS)}")
    if word_rows and word_rows not in WORD_ROWS:
        raise ValueError(f"unknown source word_rows {word_rows!r}; allowed: {', '.join(WORD_ROWS)}")
    if word_rows:
        matrix, pieces = WORD_ROWS[word_rows](vocab, files, read_dim)
        matched = pieces > 0
    else:
        (matrix, matched), pieces = READERS[fmt](vocab, files, read_dim), None
    return (up_projected(matrix, dim, int(up["seed"])) if up else matrix), matched, pieces


def up_projected(matrix: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """`matrix`'s d columns mapped to `dim` by one seeded random orthonormal map (Pretrained_UpProject's), the same for
    every run: each row's norm and every cosine kept, so a d-wide source stands in at a larger D with its geometry."""
    return pretrained_upproject(matrix, (len(matrix), dim), np.random.default_rng(seed))


def extract(
    vocab_path: str,
    source_cfg: dict,
    files: dict[str, str],
    missing: str,
    missing_seed: int,
    out_npy: str,
    out_meta_parquet: str,
    missing_params: dict | None = None,
    auxiliary: dict[str, dict] | None = None,
    source_name: str | None = None,
) -> dict:
    """Write the N x D float32 pre-trained matrix of a vocabulary and its sidecar (index, token, matched, filled).

    `source_cfg` is one config `sources` entry; `files` maps its file roles to local paths; `missing` names the
    embinit.layers.missing.MISSING_POLICIES entry that fills the rows the source lacks, with `missing_params` (config
    `embeddings.missing_params`); `auxiliary` maps each other source the policy reads (`source_names`, e.g.
    `focus`'s auxiliary space) to {"source": its config entry, "files": its file roles' local paths}, read only
    when the policy asks; `source_name`, the entry's key, prefixes a reader's error. The sidecar's `filled` column
    says what gave each row (`fill_missing`), and its file metadata holds the policy (`embinit.missing`) and its
    parameters (`embinit.missing_params`, JSON).
    Returns the match report: n, dim, matched, missing, pct (matched, % of all N rows, specials included),
    filled_by (the policy) and the missing rows' `fill_counts`; for a source with `word_rows` (a word vocabulary
    from a sub-word source, embinit.layers.readers.WORD_ROWS) also word_rows, one_piece and several_pieces (the
    matched rows that are one source row, and the means of two or more).
    """
    missing_params, auxiliary = dict(missing_params or {}), dict(auxiliary or {})
    vocab = _read_vocab(vocab_path)
    try:
        matrix, matched, pieces = source_rows(vocab, source_cfg, files)
    except ValueError as error:  # a file that does not fit its config entry (dim, weights): named by its key
        if source_name is None:
            raise
        raise ValueError(f"config key sources.{source_name}: {error}") from None
    n_matched = int(matched.sum())
    if n_matched == 0:
        raise ValueError(f"no vocabulary token of {vocab_path} was found in {', '.join(files.values())}")
    n_missing = len(vocab) - n_matched

    def read_source(name: str):
        if name not in auxiliary:
            raise ValueError(f"missing-row policy {missing!r} reads source {name!r}, not given to the extraction")
        rows, has, _ = source_rows(vocab, auxiliary[name]["source"], auxiliary[name]["files"])
        log.info("auxiliary source %s: %d of %d rows", name, int(has.sum()), len(vocab))
        return rows, has

    filled = fill_missing(vocab, matrix, matched, missing, missing_seed, missing_params, read_source)
    with atomic_path(out_npy) as tmp_npy, atomic_path(out_meta_parquet) as tmp_meta:
        np.save(tmp_npy, matrix)
        pq.write_table(_sidecar(vocab, matched, filled, missing, missing_params), tmp_meta)
    report = {
        "n": len(vocab),
        "dim": int(source_cfg["dim"]),
        "matched": n_matched,
        "missing": n_missing,
        "pct": round(100.0 * n_matched / len(vocab), 2),
        "filled_by": missing,
        **fill_counts(missing, filled),
    }
    if pieces is not None:  # the matched rows by how many of the source's rows each averages
        report |= {
            "word_rows": source_cfg["word_rows"],
            "one_piece": int((pieces == 1).sum()),
            "several_pieces": int((pieces > 1).sum()),
        }
    log.info("%s (%s): %s", out_npy, source_cfg["format"], report)
    return report
