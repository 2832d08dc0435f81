"""Prove that today's training code trains a committed run as the code that made it did, bit for bit.

    .venv/bin/python tools/prove_training_code.py RECORD [--configfile FILE] [--epochs K] [--rerun DIR] [--old COMMIT]
        [--mirror DIR]

RECORD is a final.json (results/<set>/<block>/<init>/seed<k>/<variant>/final.json) of a CPU run: a committed one, whose
config is the config/*.yaml whose results_dir holds it, or one of your own results directory anywhere, with
--configfile the config that made it (its results_dir read from the directory you run this in). The run
trains again under today's code through the workflow, with its result set's config, in results/proofs/<set>/ (ignored
by git), single-threaded on the CPU as the committed CPU runs were (--rerun DIR: a run already trained so), and is
compared with the record. Where this CPU does not reproduce the record (its floating-point kernels are not the
record's machine's), --old COMMIT, the commit that made the record, trains it again here in a git worktree, and today's
run is compared with that one. --epochs K: only the first K epochs of both (a long run's prefix). On agreement it
writes resources/code_proofs/<old>-<new>-<kind>.json; list <old> in the result set's `accepted_training_code`
(docs/reliability.md, "Code in a run's identity").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from embinit.identity.proofs import prove, training_code_of

REPO = Path(__file__).resolve().parent.parent
PROOFS = REPO / "resources" / "code_proofs"


def locate(record: Path, configfile: Path | None) -> tuple[Path, Path]:
    """The record's config file and its run's directory under the config's results_dir, before any training: given
    `configfile`, results_dir is read from the working directory; else the config/*.yaml whose results_dir holds it."""
    candidates = (
        [(configfile.resolve(), Path.cwd())]
        if configfile
        else [(p, REPO) for p in sorted((REPO / "config").glob("*.yaml"))]
    )
    for path, base in candidates:
        results_dir = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("results_dir", "results")
        if record.is_relative_to((base / results_dir).resolve()):
            return path, record.parent.relative_to((base / results_dir).resolve())
    where = f"{configfile}'s results_dir" if configfile else "no config/*.yaml's results_dir (give --configfile)"
    sys.exit(f"{record}: not under {where}")


def retrain(configfile: Path, run: Path, epochs: int | None, mirror: str, code: Path = REPO) -> Path:
    """Train run `run` of `configfile`'s results (`locate`) again through the workflow of `code` (this checkout, or a
    worktree of an older commit), in its results/proofs/<set>/, single-threaded; its run directory."""
    result_set = yaml.safe_load(configfile.read_text(encoding="utf-8"))
    proof_dir = f"results/proofs/{Path(result_set.get('results_dir', 'results')).name}"
    # K epochs for every block of the set, so blocks the config check holds to one model (Table 14's controls) agree
    blocks = {block: {"epochs": epochs} for block in {run.parts[0], *result_set.get("blocks", {})}}
    override = {"results_dir": proof_dir} | ({"blocks": blocks} if epochs else {})
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(override, handle)
    target = f"{proof_dir}/{run}/final.json"
    command = [sys.executable, "-m", "snakemake", target, "--cores", "1", "--set-threads", "train=1", "--forcerun",
               "train", "--configfile", str(_in(code, configfile)), handle.name, "--config",
               f"mirror={Path(mirror).resolve()}"]  # fmt: skip
    subprocess.run(command, cwd=code, env={**os.environ, "PYTHONPATH": str(code)}, check=True)
    return code / proof_dir / run


def _in(code: Path, configfile: Path) -> Path:
    """The config file as `code` has it: a result set's own from that checkout, a user's as it is."""
    return code / configfile.relative_to(REPO) if configfile.is_relative_to(REPO / "config") else configfile


def worktree(commit: str) -> Path:
    """A git worktree of `commit` beside the system's temporary files (made once)."""
    path = Path(tempfile.gettempdir()) / f"embinit-proof-{commit}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=REPO, check=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--epochs", type=int, help="compare only the first K epochs (a prefix of a long run)")
    parser.add_argument("--rerun", type=Path, help="a run directory already trained again under today's code")
    parser.add_argument("--old", metavar="COMMIT", help="the commit that made the record, trained again here")
    parser.add_argument("--mirror", default="../shared/data")
    parser.add_argument("--configfile", type=Path, help="the config that made a record outside config/*'s results")
    args = parser.parse_args()
    record = args.record.resolve()
    configfile, run = locate(record, args.configfile)  # a record no config holds stops here, before any training
    new = args.rerun or retrain(configfile, run, args.epochs, args.mirror)
    old, source = record.parent, "record"
    if args.old:
        old, source = (
            retrain(configfile, run, args.epochs, args.mirror, worktree(args.old)),
            f"commit {args.old}",
        )
        if training_code_of(old) == training_code_of(new):
            sys.exit(f"{args.old} trains with today's training code {training_code_of(new)[:8]}: nothing to prove")
    try:
        name = str(record.relative_to(REPO) if record.is_relative_to(REPO) else record)  # a record elsewhere: its path
        path = prove(old, new, name, args.epochs, PROOFS, source)
    except ValueError as error:
        sys.exit(str(error))
    print(f"proof written: {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
