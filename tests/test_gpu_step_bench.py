"""bench/gpu_step.py runs its smallest setting on the CPU with only what a GPU machine's image without internet holds."""

import json
import os
import subprocess
import sys

from conftest import REPO

ABSENT_ON_THE_GPU_IMAGE = ["jsonschema", "spacy", "snakemake"]  # the image has torch, numpy, pandas, pyarrow, tqdm


def test_the_smallest_setting_runs_on_the_cpu_without_the_workflows_packages(tmp_path):
    blocked = tmp_path / "blocked"
    for name in ABSENT_ON_THE_GPU_IMAGE:  # a package that fails to import, first on the path (workers inherit it)
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not on the GPU image')\n")
    out = tmp_path / "bench.json"
    command = [sys.executable, "bench/gpu_step.py", "--device", "cpu", "--dim", "16", "--steps", "2", "--warmup", "1"]
    command += ["--sentences", "64", "--runs", "1", "--threads", "1", "--json", str(out)]
    path = os.pathsep.join([str(blocked), str(REPO), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path}, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "bf16: skipped on the CPU" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["precision"], r["runs"]) for r in rows] == [
        ("translator", "fp32", 1),
        ("classifier", "fp32", 1),
    ]
    for r in rows:
        assert r["steps_per_second"] > 0 and r["tokens_per_second"] > 0 and r["peak_mib"] > 0, r
        assert 0 < r["loss_share"] < 1, r
    assert "| translator | fp32 | 1 |" in proc.stdout
