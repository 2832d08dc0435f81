"""What a snakemake start costs, before and after a change, alternated in one shell: user CPU seconds of
`--list-rules` (parse only), `-n` of one run's final.json and `-n results/table1.csv`, each in a fresh directory
holding the tests' one-run config on their tiny mirror (tests/conftest.py), so both trees plan the same DAG.

    git worktree add /tmp/before <commit>
    python bench/snakemake_start.py --before /tmp/before --after . [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from conftest import ONE_RUN, one_run_config, snakemake_command, write_tiny_mirror  # noqa: E402

CASES = {
    "--list-rules": ["--list-rules"],
    "-n run": ["-n", f"{ONE_RUN}/final.json"],
    "-n table1": ["-n", "results/table1.csv"],
}


def user_seconds(tree: Path, args: list[str]) -> float:
    """The user CPU seconds of one snakemake start of `tree`'s workflow and code, in a fresh directory."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = one_run_config(work / "c.yaml", write_tiny_mirror(work / "mirror"))
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
        command = snakemake_command(work, tree)
        env = {**os.environ, "PYTHONPATH": str(tree)}
        # from the fresh directory: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH
        run = [*command, "--configfile", str(config), *args]
        subprocess.run(run, env=env, cwd=work, capture_output=True, check=True)
        return resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for label, tree in (("before", args.before.resolve()), ("after", args.after.resolve())):
            for case, case_args in CASES.items():
                times.setdefault((label, case), []).append(user_seconds(tree, case_args))
    for case in CASES:
        before, after = times[("before", case)], times[("after", case)]
        print(
            f"{case:13s} before {statistics.mean(before):.2f} s, after {statistics.mean(after):.2f} s (user CPU, mean of {args.rounds})"
        )


if __name__ == "__main__":
    main()
