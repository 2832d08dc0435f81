"""Prove that today's training code trains a committed run as the code that made it did, bit for bit.

    .venv/bin/python tools/prove_training_code.py RECORD [--epochs K] [--rerun DIR] [--mirror ../shared/data]

RECORD is a committed final.json (results/<set>/<block>/<init>/seed<k>/<variant>/final.json). Without --rerun the
run trains again through the workflow, under its result set's config, in results/proofs/<set>/ (ignored by git),
single-threaded on the CPU; --epochs K trains and compares only its first K epochs (a long run's prefix); --rerun DIR
takes a run already trained again there (e.g. by a rebuilt result set). On agreement it writes
resources/code_proofs/<old>-<new>.json; list <old> in the result set's `accepted_training_code` (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from embinit.proofs import prove

REPO = Path(__file__).resolve().parent.parent
PROOFS = REPO / "resources" / "code_proofs"


def result_set_config(record: Path) -> Path:
    """The config file whose results_dir holds `record`."""
    for path in sorted((REPO / "config").glob("*.yaml")):
        results_dir = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("results_dir")
        if results_dir and record.is_relative_to(REPO / results_dir):
            return path
    sys.exit(f"{record}: no config/*.yaml has a results_dir that holds it")


def retrain(record: Path, epochs: int | None, mirror: str) -> Path:
    """Train the record's run again in results/proofs/<set>/ through the workflow; its run directory."""
    configfile = result_set_config(record)
    results_dir = yaml.safe_load(configfile.read_text(encoding="utf-8"))["results_dir"]
    run = record.parent.relative_to(REPO / results_dir)
    block = run.parts[0]
    proof_dir = f"results/proofs/{Path(results_dir).name}"
    override = {"results_dir": proof_dir} | ({"blocks": {block: {"epochs": epochs}}} if epochs else {})
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(override, handle)
    target = f"{proof_dir}/{run}/final.json"
    command = [sys.executable, "-m", "snakemake", "--cores", "1", "--set-threads", "train=1", "--configfile",
               str(configfile), handle.name, "--config", f"mirror={mirror}", "--forcerun", target, "--", target]  # fmt: skip
    subprocess.run(command, cwd=REPO, check=True)
    return REPO / proof_dir / run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--epochs", type=int, help="compare only the first K epochs (a prefix of a long run)")
    parser.add_argument("--rerun", type=Path, help="a run directory already trained again under today's code")
    parser.add_argument("--mirror", default="../shared/data")
    args = parser.parse_args()
    record = args.record.resolve()
    new = args.rerun or retrain(record, args.epochs, args.mirror)
    try:
        path = prove(record.parent, new, str(record.relative_to(REPO)), args.epochs, PROOFS)
    except ValueError as error:
        sys.exit(str(error))
    print(f"proof written: {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
