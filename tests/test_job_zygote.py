"""The tests' script jobs (tests/job_zygote.py) run as `python script.py` runs them: the same output, exit code,
directory, arguments and sys.path, a signal's end, and no job left behind by a shim killed outright; anything else,
or a job whose interpreter settings differ, runs in the real interpreter."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ZYGOTE_ENV
from job_zygote import JobZygote

PROBE = """import json, os, sys
print(json.dumps({"cwd": os.getcwd(), "argv": sys.argv, "path": sys.path[:2], "name": __name__,
                  "probe": os.environ.get("JOB_PROBE"), "forked": "torch" in sys.modules}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def jobs():
    zygote = JobZygote(ZYGOTE_ENV)
    deadline = time.monotonic() + 120
    while not zygote.socket.exists():  # it listens once its libraries are imported
        assert zygote.proc.poll() is None and time.monotonic() < deadline, "the job zygote never listened"
        time.sleep(0.1)
    yield zygote
    zygote.close()


def script(tmp_path, text: str, name: str = "probe"):
    """A script where Snakemake writes its script jobs."""
    path = tmp_path / ".snakemake" / "scripts" / f"tmpab12cd34.{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run(python, args, tmp_path, **env):
    return subprocess.run(
        [str(python), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**ZYGOTE_ENV, "PYTHONPATH": str(tmp_path / "lib"), **env},
        timeout=120,
    )


def test_a_script_job_forks_and_runs_as_a_fresh_interpreter_runs_it(jobs, tmp_path):
    path = script(tmp_path, PROBE)
    fresh = run(sys.executable, [path, 3, "x"], tmp_path, JOB_PROBE="p")
    forked = run(jobs.python, [path, 3, "x"], tmp_path, JOB_PROBE="p")
    assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr) == (3, "to stderr\n")
    seen, expected = json.loads(forked.stdout), json.loads(fresh.stdout)
    assert seen.pop("forked") and not expected.pop("forked")  # torch was imported in the server, not by the job
    assert seen == expected
    assert expected["path"] == [str(path.parent), str(tmp_path / "lib")] and expected["name"] == "__main__"


def test_a_signal_to_the_shim_ends_the_job_and_the_shim_alike(jobs, tmp_path):
    path = script(tmp_path, "import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    shim = subprocess.Popen([str(jobs.python), str(path)], stdout=subprocess.PIPE, text=True, env=ZYGOTE_ENV)
    assert shim.stdout.readline() == "started\n"
    shim.send_signal(signal.SIGTERM)
    assert shim.wait(timeout=30) == -signal.SIGTERM


def test_a_shim_killed_outright_takes_its_job_with_it(jobs, tmp_path):
    path = script(tmp_path, "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n")
    shim = subprocess.Popen([str(jobs.python), str(path)], stdout=subprocess.PIPE, text=True, env=ZYGOTE_ENV)
    job = int(shim.stdout.readline())
    assert job != shim.pid
    shim.kill()
    shim.wait(timeout=30)
    deadline = time.monotonic() + 30
    while alive(job):
        assert time.monotonic() < deadline, f"job {job} outlived its shim"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie has ended; a reaped one is gone, perhaps between two reads)."""
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    "args, env",
    [
        (["-c", "import sys; print(sys.argv[1:])", "-m"], {}),  # not a script job
        (["SCRIPT", 0], {"PYTHONHASHSEED": "1"}),  # another hash seed than the server's
    ],
)
def test_anything_else_runs_in_the_real_interpreter(jobs, tmp_path, args, env):
    path = script(tmp_path, PROBE.replace('"forked": ', '"executable": sys.executable, "forked": '))
    args = [path if a == "SCRIPT" else a for a in args]
    proc = run(jobs.python, args, tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    if args[0] == "-c":
        assert proc.stdout == "['-m']\n"
    else:
        seen = json.loads(proc.stdout)
        assert not seen["forked"] and seen["executable"] == sys.executable
