"""Proofs that two versions of the training code train alike, so the records of the older stay current.

A run record names the training code that made it (`training_code`). A result set keeps records of earlier code only
when its config lists their digest (`accepted_training_code`), and each listed digest needs a proof here: a sample
run trained by the older code and by the newer gave the same numbers bit for bit. The older code's run is the
committed record itself where the newer code reproduces it on the proving machine, else the older commit trained
again on that machine (floating-point kernels differ between CPUs, so a record made elsewhere may be reproducible by
neither). A proof file keeps both runs' numbers, so a test checks it against the committed records without training
anything (tests/test_records.py). Proofs chain: a digest proven equal to one proven equal to today's is accepted too.
A record a result set has since trained again under newer code stays as the proof's witness in PROOFS/witnesses/.
The workflow's config check follows the chain of every accepted digest before any job (`accepted_problems`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

from embinit.io import write_text_atomic

PROOFS = Path(__file__).resolve().parents[2] / "resources" / "code_proofs"  # committed, beside the package
# Record fields that say where and how fast a run ran, or which code and spec made it, not what it learned
PLACE_FIELDS = (
    "train_minutes_per_epoch",
    "valid_minutes_per_epoch",
    "device",
    "stack",
    "training_code",
    "spec_digest",
)
# Metrics columns of the same kind: seconds and throughput
TIME_COLUMNS = ("train_seconds", "valid_seconds", "tokens_per_second", "mechanism_seconds")


def numbers(run_dir: str | os.PathLike, epochs: int | None = None) -> dict:
    """What a run learned, from its final.json and metrics.parquet: every record field but PLACE_FIELDS and every
    metrics column but TIME_COLUMNS, by epoch. `epochs`: only the first that many epochs' rows, and no final.json
    (the prefix of a longer run, whose best epoch and scores come later)."""
    run_dir = Path(run_dir)
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    if epochs is not None:
        metrics = metrics[metrics.epoch <= epochs]
    rows = metrics.drop(columns=[c for c in TIME_COLUMNS if c in metrics]).to_dict("records")
    if epochs is not None:
        return {"metrics": rows}
    return {"final": {k: v for k, v in _record(run_dir).items() if k not in PLACE_FIELDS}, "metrics": rows}


def _same(a, b) -> bool:
    """Equal bit for bit, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def differences(old: dict, new: dict) -> list[str]:
    """Where two runs' `numbers` differ, over what both hold (a field or column only the newer code writes, such as
    `split_sizes`, is not a difference in what was learned); empty when they agree bit for bit."""
    found = []
    if "final" in old and "final" in new:
        found += [f"final.{k}: {old['final'][k]!r} != {new['final'][k]!r}"
                  for k in sorted(old["final"].keys() & new["final"].keys())
                  if not _same(old["final"][k], new["final"][k])]  # fmt: skip
    if len(old["metrics"]) != len(new["metrics"]):
        return found + [f"metrics: {len(old['metrics'])} epochs != {len(new['metrics'])}"]
    for a, b in zip(old["metrics"], new["metrics"]):
        found += [f"metrics epoch {a['epoch']} {c}: {a[c]!r} != {b[c]!r}"
                  for c in sorted(a.keys() & b.keys()) if not _same(a[c], b[c])]  # fmt: skip
    return found


def _record(run_dir: str | os.PathLike) -> dict:
    return json.loads((Path(run_dir) / "final.json").read_text(encoding="utf-8"))


def training_code_of(run_dir: str | os.PathLike) -> str:
    return _record(run_dir)["training_code"]


def prove(old_dir, new_dir, record: str, epochs: int | None, proofs_dir, source: str = "record") -> Path:
    """Write the proof that the code of `new_dir`'s run trains as that of `old_dir`'s (the same run; `record` is the
    committed final.json it stands for, relative to the repository; `source`: where `old_dir` comes from, the record
    itself or "commit <sha>" trained again), or raise ValueError with the differences."""
    old, new = numbers(old_dir, epochs), numbers(new_dir, epochs)
    found = differences(old, new)
    if found:
        raise ValueError(f"{record}: the two runs differ, so no proof:\n" + "\n".join(found[:20]))
    was, now = _record(old_dir), _record(new_dir)
    proof = {
        "old": {"training_code": was["training_code"], "numbers": old, "source": source, "device": was["device"]},
        "new": {"training_code": now["training_code"], "numbers": new, "device": now["device"]},
        "record": record,
        "epochs": "all" if epochs is None else epochs,
    }
    # one file per code pair and kind of run: a translation's proof (decoder, BLEU) does not replace a classifier's
    kind = f"-{was['kind']}" if was.get("kind") else ""
    path = Path(proofs_dir) / f"{was['training_code'][:8]}-{now['training_code'][:8]}{kind}.json"
    write_text_atomic(path, json.dumps(proof, indent=1, sort_keys=True, default=str) + "\n")
    return path


def load_proofs(proofs_dir: str | os.PathLike) -> list[dict]:
    return [
        json.loads(p.read_text(encoding="utf-8")) | {"path": str(p)} for p in sorted(Path(proofs_dir).glob("*.json"))
    ]


def proof_chain(accepted: str, current: str, proofs: list[dict]) -> list[dict] | None:
    """The proofs that lead from the digest `accepted` (its leading hex digits) to `current`, or None."""
    step = {p["old"]["training_code"]: p for p in proofs}
    digest = current if current.startswith(accepted) else next((d for d in step if d.startswith(accepted)), None)
    chain = []
    while digest != current:
        if digest not in step or len(chain) == len(step):  # no proof onward, or a loop
            return None
        chain.append(step[digest])
        digest = step[digest]["new"]["training_code"]
    return chain


def proof_problems(proof: dict, repo: str | os.PathLike) -> list[str]:
    """What is wrong with a proof: its two runs' numbers differ, or its committed record holds neither run's code,
    or (where the older run is the record itself) not that run's numbers."""
    old, new = proof["old"]["numbers"], proof["new"]["numbers"]
    problems = [f"{proof['path']}: {d}" for d in differences(old, new)]
    record = Path(repo) / proof["record"]
    if not record.is_file():
        return problems + [f"{proof['path']}: its record {proof['record']} is not committed"]
    epochs = None if proof["epochs"] == "all" else int(proof["epochs"])
    committed, made_by = numbers(record.parent, epochs), training_code_of(record.parent)
    side = next((s for s in ("old", "new") if proof[s]["training_code"] == made_by), None)
    if side is None:
        return problems + [f"{proof['path']}: {proof['record']} is of training code {made_by[:8]}, neither run's"]
    if side == "old" and proof["old"]["source"] != "record":
        return problems  # the older commit trained again on the proving machine: the record's own CPU may differ
    return problems + [f"{proof['path']}: {proof['record']} differs from its {side} run: {d}"
                       for d in differences(committed, proof[side]["numbers"])]  # fmt: skip


def accepted_problems(accepted: list[str], current: str, proofs_dir=PROOFS) -> list[str]:
    """Why a result set may not keep records of the training code digests it `accepted`: a digest no chain of
    committed proofs leads from to `current`, or a proof on the way that does not hold (`proof_problems`)."""
    proofs, repo = load_proofs(proofs_dir), Path(proofs_dir).resolve().parents[1]
    problems = []
    for i, digest in enumerate(accepted):
        chain = proof_chain(digest, current, proofs)
        if chain is None:
            problems.append(
                f"config key accepted_training_code[{i}]: no committed proof leads from training code {digest} to "
                f"today's {current[:8]} ({proofs_dir}; tools/prove_training_code.py writes one)"
            )
        problems += [
            f"config key accepted_training_code[{i}]: {p}" for proof in chain or [] for p in proof_problems(proof, repo)
        ]
    return problems
