"""Where the test suite's CPU goes, by the kind of process and by test: snakemake starts, each rule's jobs, the pytest
workers' own work.

    SUITE_CPU_LOG=/tmp/procs.jsonl PYTHONPATH=bench/suite_cpu_hook .venv/bin/pytest -q   # one line a Python process
    python bench/suite_cpu.py /tmp/procs.jsonl [--tests 20]

A snakemake job runs its script from .snakemake/scripts/tmpXXXX.<script>.py, so its kind is `job:<script>`; a
snakemake start is any other process with snakemake in its arguments.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict


def kind_of(argv: list[str]) -> str:
    """The kind of a logged process, from its arguments."""
    text = " ".join(argv)
    if job := re.search(r"\.snakemake/scripts/tmp\w+\.(\w+)\.py", text):
        return f"job:{job.group(1)}"
    if "snakemake" in text or "Snakefile" in text:
        return "snakemake start"
    if "pytest" in text or "xdist" in text or argv[:1] == ["-c"]:
        return "pytest"
    return "other"


def summary(lines: list[dict]) -> tuple[dict[str, list[float]], dict[str, dict[str, list[float]]]]:
    """CPU seconds and counts [n, cpu] by kind, and by test then kind."""
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    by_test: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
    for line in lines:
        kind = kind_of(line["argv"])
        for cell in (by_kind[kind], by_test[line["test"] or "(none)"][kind]):
            cell[0] += 1
            cell[1] += line["cpu"]
    return dict(by_kind), {t: dict(k) for t, k in by_test.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("--tests", type=int, default=20)
    args = parser.parse_args()
    with open(args.log, encoding="utf-8") as f:
        by_kind, by_test = summary([json.loads(line) for line in f if line.strip()])
    total = sum(cpu for _, cpu in by_kind.values())
    print(f"{total:.0f} CPU s in {sum(n for n, _ in by_kind.values()):.0f} Python processes")
    for kind, (n, cpu) in sorted(by_kind.items(), key=lambda item: -item[1][1]):
        print(f"{cpu:8.0f} s {cpu / total:6.1%} {n:6.0f} processes {cpu / n:6.2f} s each  {kind}")
    print()
    ranked = sorted(by_test.items(), key=lambda item: -sum(cpu for _, cpu in item[1].values()))
    for test, kinds in ranked[: args.tests]:
        top = ", ".join(f"{k} {n:.0f}/{c:.0f} s" for k, (n, c) in sorted(kinds.items(), key=lambda i: -i[1][1])[:3])
        print(f"{sum(c for _, c in kinds.values()):7.0f} s {test}: {top}")


if __name__ == "__main__":
    main()
