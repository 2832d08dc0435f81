"""The tests' snakemake starts (tests/snakemake_zygote.py) behave as fresh `python -m snakemake` processes: the same
output and exit code, the caller's directory and environment, a timeout that kills, and a fresh process where the
environment changes how an interpreter starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import ZYGOTE_ENV, one_run_config, snakemake_command, write_tiny_mirror
from snakemake_zygote import Zygote

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(ZYGOTE_ENV)
    yield z
    z.close()


def stable(output: str) -> list[str]:
    """Snakemake's output less what differs between two starts: times, the workflow id, the log file's name, and the
    order of the jobs a dry run lists (independent jobs come in an order that follows their objects' addresses, the
    same in every fresh start and another in a forked one: the jobs are compared as sorted blocks)."""
    varying = ("  Date: ", "  Workflow ID: ", "Complete log")
    clock = re.compile(r"\[\w{3} \w{3} +\d+ [\d:]+ \d{4}\]")  # a job's start: [Sat Nov 28 21:10:22 2026]
    lines = [line for line in output.splitlines() if not line.startswith(varying) and not clock.fullmatch(line)]
    head, blocks, tail = [], [], []
    for line in lines:
        if line.startswith(("rule ", "localrule ", "checkpoint ")) and not tail:
            blocks.append([line])
        elif blocks and not tail and line != "Job stats:":
            blocks[-1].append(line)
        else:
            (tail if blocks else head).append(line)
    return head + [line for block in sorted(blocks) for line in block] + tail


def test_a_forked_start_prints_and_exits_as_a_fresh_one(zygote, tmp_path):
    config = one_run_config(tmp_path / "c.yaml", write_tiny_mirror(tmp_path / "mirror"))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    codes, outputs = [], []
    cases = (
        ["-n", "results/sst2_glove6b50d/Pretrained/seed0/base/final.json"],
        ["-n", "no/such/target"],
        ["--no-such"],
    )
    for args in cases:  # a plan, a workflow error, and an argument error that ends the start within a second
        cmd = [*snakemake_command(tmp_path), "--configfile", str(config), *args]
        fresh = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        forked = zygote.run(cmd, env, timeout=300)
        assert (forked.returncode, stable(forked.stdout), stable(forked.stderr)) == (
            fresh.returncode,
            stable(fresh.stdout),
            stable(fresh.stderr),
        )
        codes.append(forked.returncode)
        outputs.append(forked.stdout + forked.stderr)
    assert codes == [0, 1, 2]
    assert "No rule to produce no/such/target" in outputs[1] and "unrecognized arguments: --no-such" in outputs[2]


def test_a_forked_start_takes_the_callers_directory_and_environment(zygote, tmp_path, monkeypatch):
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        'rule all:\n    run:\n        import os\n        print(os.getcwd(), os.environ["ZYGOTE_PROBE"])\n'
    )
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PYTHONHASHSEED": "0", "ZYGOTE_PROBE": "probe-1"}
    proc = zygote.run([sys.executable, "-m", "snakemake", "-s", str(snakefile), "--cores", "1"], env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{tmp_path} probe-1" in proc.stdout


def test_a_start_past_its_timeout_is_killed_and_the_zygote_serves_the_next(zygote, tmp_path, monkeypatch):
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text("rule all:\n    run:\n        import time\n        time.sleep(600)\n")
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([sys.executable, "-m", "snakemake", "-s", str(snakefile), "--cores", "1"], env, timeout=10)
    proc = zygote.run([sys.executable, "-m", "snakemake", "-s", str(snakefile), "--list-rules"], env, timeout=120)
    assert proc.returncode == 0 and "all" in proc.stdout


def test_an_interpreter_start_variable_asks_for_a_fresh_process(zygote):
    assert zygote.can_run({**zygote.env})
    assert not zygote.can_run({**zygote.env, "PYTHONPROFILEIMPORTTIME": "1"})
    assert not zygote.can_run({**zygote.env, "PYTHONPATH": "/elsewhere"})
