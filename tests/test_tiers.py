"""The tiers stay honest: a test that starts snakemake must carry the slow marker (so `pytest -m "not slow"` stays
fast), and a test marked `cuda` is skipped, not passed, where there is no GPU."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, run_snakemake


def test_an_unmarked_test_that_starts_snakemake_fails_before_it_starts(tmp_path):
    with pytest.raises(pytest.fail.Exception, match="test_tiers.py::.* starts snakemake: mark it @pytest.mark.slow"):
        run_snakemake(["--version"], cwd=tmp_path)


def test_cuda_tests_are_skipped_saying_why_where_torch_has_no_cuda():
    """CI has no GPU: there every test marked `cuda` is reported as skipped with its reason, none as passed."""
    proc = subprocess.run(
        # -n 0: one process (pyproject's addopts start three workers, whose lines read otherwise)
        [sys.executable, "-m", "pytest", "-n", "0", "-v", "-rs", "-p", "no:cacheprovider", "tests/test_cuda.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},  # no GPU, also on a machine that has one
        timeout=300,
    )
    lines = proc.stdout.splitlines()
    results = [line for line in lines if line.startswith("tests/test_cuda.py::")]
    assert proc.returncode == 0 and len(results) >= 6, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert all(" SKIPPED " in line for line in results), "\n".join(results)
    counts = [re.fullmatch(r"SKIPPED \[(\d+)\] tests/test_cuda.py[:\d]*: (.*)", line) for line in lines]
    counts = [(int(m[1]), m[2]) for m in counts if m]
    assert all(re.fullmatch(r"needs CUDA: torch \S+ sees no CUDA device", reason) for _, reason in counts), lines[-12:]
    assert sum(n for n, _ in counts) == len(results) and " passed" not in lines[-1], lines[-12:]
