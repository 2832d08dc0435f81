"""bench/suite_cpu.py: a process run with its hook on PYTHONPATH writes its line as it exits, and the report sorts the
lines by kind and by test."""

import json
import os
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
from suite_cpu import kind_of, summary  # noqa: E402


def test_a_process_writes_its_cpu_and_test_as_it_exits(tmp_path):
    log = tmp_path / "procs.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO / "bench" / "suite_cpu_hook"), "SUITE_CPU_LOG": str(log)}
    env["PYTEST_CURRENT_TEST"] = "tests/test_x.py::test_y (call)"
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"
    subprocess.run([sys.executable, "-c", spin], env=env, check=True, timeout=60)
    (line,) = [json.loads(text) for text in log.read_text().splitlines()]
    assert line["test"] == "tests/test_x.py::test_y" and line["argv"] == ["-c"] and line["cpu"] >= 0.2


def test_processes_are_told_apart_and_summed_by_kind_and_test():
    train = ["/tmp/w/.snakemake/scripts/tmpab12_x.train.py"]
    start = ["/venv/bin/python", "-m", "snakemake", "--snakefile", "/repo/Snakefile"]
    assert [kind_of(a) for a in (train, start, ["-c"], ["/usr/bin/tool"])] == [
        "job:train",
        "snakemake start",
        "pytest",
        "other",
    ]
    lines = [
        {"argv": train, "cpu": 2.0, "test": "t1"},
        {"argv": train, "cpu": 3.0, "test": "t2"},
        {"argv": start, "cpu": 4.0, "test": "t1"},
    ]
    by_kind, by_test = summary(lines)
    assert by_kind == {"job:train": [2, 5.0], "snakemake start": [1, 4.0]}
    assert by_test["t1"] == {"job:train": [1, 2.0], "snakemake start": [1, 4.0]}
