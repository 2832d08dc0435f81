"""The embedding match report: per block side, how many vocabulary rows the source gave and what filled the rest."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq

from embinit.io import atomic_path
from embinit.layers.missing import fill_counts
from embinit.layers.pretrained import META_MISSING

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

    `entries`: dicts with keys block, side, source, path (the sidecar parquet: the layer sheet's tokens rows).
    """
    rows = []
    for e in entries:
        sidecar = pd.read_parquet(e["path"])
        matched = sidecar["matched"].to_numpy(dtype=bool)
        policy = pq.read_schema(e["path"]).metadata[META_MISSING].decode()
        rows.append(
            {
                "block": e["block"],
                "side": e["side"],
                "source": e["source"],
                "matched": int(matched.sum()),
                "missing": int((~matched).sum()),
                "pct": round(100.0 * matched.mean(), 2),
                "filled_by": policy,
                **fill_counts(policy, sidecar["filled"].astype(str)),
            }
        )
    table = pd.DataFrame(rows, columns=MATCH_REPORT_COLUMNS)
    with atomic_path(out_csv) as tmp:
        table.to_csv(tmp, index=False)
    return table
