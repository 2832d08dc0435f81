"""bench/stacked_step.py: k translators stacked on a run axis compute what the k models compute (dropout off), and
the bench runs on the CPU with only what a GPU machine's image without internet holds."""

import json
import os
import subprocess
import sys

from conftest import REPO
from test_gpu_step_bench import ABSENT_ON_THE_GPU_IMAGE


def test_stacked_runs_compute_their_own_models_losses_and_the_bench_reports_both_timings(tmp_path):
    blocked = tmp_path / "blocked"
    for name in ABSENT_ON_THE_GPU_IMAGE:
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not on the GPU image')\n")
    out = tmp_path / "stacked.json"
    command = [sys.executable, "bench/stacked_step.py", "--device", "cpu", "--dims", "16", "--ks", "1", "3"]
    command += ["--steps", "1", "--json", str(out)]
    path = os.pathsep.join([str(blocked), str(REPO), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path}, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["D"], r["k"]) for r in rows] == [(16, 1), (16, 3)]
    for r in rows:
        assert r["loss rel. diff"] < 1e-5, r  # three runs of their own seeds: a mixed-up run axis differs by far more
        assert r["alone s/step"] > 0 and r["stacked s/step"] > 0 and r["speedup"] > 0, r
