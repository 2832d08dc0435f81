"""Each Python process of a test run writes one line as it exits: its argv, its CPU seconds and the test that started
it (PYTEST_CURRENT_TEST, which the subprocesses of a test inherit). Loaded by `site` when this folder is on
PYTHONPATH; bench/suite_cpu.py says how to use it. A process killed by a signal writes none."""

import atexit
import json
import os
import resource
import sys


def _write():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = {
        "argv": sys.argv[:6],
        "cpu": usage.ru_utime + usage.ru_stime,
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
    }
    with open(os.environ["SUITE_CPU_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


if os.environ.get("SUITE_CPU_LOG"):
    atexit.register(_write)
