"""Ctrl-C reaches every job Snakemake runs: a job script ends with one line naming its job, not a traceback."""

import ast
import signal
import subprocess
import sys

from conftest import REPO

JOB = """
import time
from types import SimpleNamespace
from embinit.interrupt import quiet_interrupt
quiet_interrupt(SimpleNamespace(rule="train", wildcards={"block": "b", "seed": "0"}))
print("ready", flush=True)
time.sleep(60)
"""


def test_a_job_stopped_by_ctrl_c_says_so_in_one_line_and_exits_130():
    job = subprocess.Popen(
        [sys.executable, "-c", JOB], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert job.stdout.readline() == "ready\n"
    job.send_signal(signal.SIGINT)
    _, err = job.communicate(timeout=30)
    assert job.returncode == 130
    assert err == "embinit: job train (block=b, seed=0) interrupted (Ctrl-C)\n"  # no KeyboardInterrupt traceback


def test_every_workflow_script_installs_it():
    for script in sorted((REPO / "workflow_scripts").glob("*.py")):
        calls = [n for n in ast.walk(ast.parse(script.read_text())) if isinstance(n, ast.Call)]
        assert any(getattr(c.func, "id", None) == "quiet_interrupt" for c in calls), script.name
