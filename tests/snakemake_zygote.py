"""Snakemake starts for the tests, forked from one process that has already imported snakemake and its plugins.

A fresh `python -m snakemake` spends about 1.8 s of CPU importing snakemake, its plugins (the SLURM executor's imports
pandas) and collecting them, before it reads the Snakefile; the suite starts snakemake about 150 times. Each pytest
worker keeps one zygote (this file run as a script), which imports those, and the libraries a start imports later
(`PRELOADED`), once and forks a child per start. The child
takes the caller's working directory, environment, argv and output files, then runs `snakemake.cli.main` as the
interpreter's main program and exits as `python -m snakemake` would (atexit handlers, flushed streams, its exit code).
The workflow's own code (embinit, the Snakefile) is imported in each child, never in the zygote, so an edited file is
read as a fresh start reads it. A start whose environment changes how an interpreter starts (a PYTHON* variable other
than the zygote's) runs as a fresh process instead (`Zygote.can_run`). Given a `python` (tests/job_zygote.py's shim), a
child runs its script jobs with it: they fork from the job zygote, which has imported torch.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path


class Zygote:
    """The pytest side: one zygote process, started on first use, asked for one start at a time."""

    def __init__(self, env: dict[str, str], python: str | None = None) -> None:
        self.env = env
        self.python = python  # the Python of its starts' script jobs (tests/job_zygote.py's shim), or theirs
        self.proc = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env, text=True
        )

    def can_run(self, env: dict[str, str]) -> bool:
        """Whether a start with `env` behaves in a fork as in a fresh interpreter: the zygote is alive and no
        interpreter-start variable (PYTHONPATH, PYTHONPROFILEIMPORTTIME, ...) differs from the zygote's."""
        start_vars = {k for k in {*env, *self.env} if k.startswith("PYTHON")}
        return self.proc.poll() is None and all(env.get(k) == self.env.get(k) for k in start_vars)

    def run(self, cmd: list[str], env: dict[str, str], timeout: float | None) -> subprocess.CompletedProcess:
        """`subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)` for cmd = [python, "-m",
        "snakemake", ...], in a child of the zygote, which kills the child at its timeout."""
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {"argv": cmd[3:], "cwd": os.getcwd(), "env": env, "timeout": timeout, "python": self.python}
            self.proc.stdin.write(json.dumps({**request, "stdout": str(out), "stderr": str(err)}) + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
            if not reply:
                raise RuntimeError(f"the snakemake zygote ended (exit code {self.proc.wait()})")
            code, timed_out = map(int, reply.split())
            if timed_out:
                raise subprocess.TimeoutExpired(cmd, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _serve() -> dict | None:
    """The zygote's loop: a child per request line, killed at its timeout; after reaping it, the reply line is its
    exit code (-N for signal N) and whether it timed out. Returns the request in the child, None at end of input."""
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the handler below is the zygote's, not snakemake's
            return request
        timed_out = []

        def kill(signum, frame, pid=pid, timed_out=timed_out):
            timed_out.append(True)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still the child's

        signal.signal(signal.SIGALRM, kill)
        signal.setitimer(signal.ITIMER_REAL, request["timeout"] or 0)  # None: no limit
        _, status = os.waitpid(pid, 0)  # resumed after the handler (PEP 475) until the child ends
        signal.setitimer(signal.ITIMER_REAL, 0)
        print(os.waitstatus_to_exitcode(status), int(bool(timed_out)), flush=True)
    return None


def _become(request: dict) -> None:
    """Make this child the process `python -m snakemake <argv>` would be in the caller's directory and environment."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.path[0] = request["cwd"]  # `python -m` puts the working directory first
    sys.argv = [str(Path(snakemake.__file__).with_name("__main__.py")), *request["argv"]]
    if request["python"]:
        sys.executable = request["python"]  # what Snakemake runs its script jobs with


# Libraries a start imports after its argument parser, none of them the workflow's code: snakemake's source cache
# and notebook support (requests, smart_open, nbformat), the workflow's Parquet, hub client and progress bars
PRELOADED = ("requests", "smart_open", "nbformat", "pyarrow.parquet", "huggingface_hub", "filelock", "tqdm")


if __name__ == "__main__":
    import snakemake
    import snakemake.cli

    snakemake.cli.get_argument_parser()  # imports and collects the installed plugins once, for every child
    for library in PRELOADED:
        importlib.import_module(library)
    child = _serve()
    if child is not None:
        _become(child)
        snakemake.cli.main(child["argv"])
