"""Snakemake's script jobs in the tests (train, report, build_vocab, ...), forked from one process that has already
imported torch, torch._dynamo (Adam's first step imports it), numpy, pandas and the other libraries jobs import.

A toy training job spends about 4 of its 4.5 CPU s importing those. Snakemake runs a script job as
`{sys.executable} .snakemake/scripts/tmpXXXX.<script>.py`; in a start forked from the snakemake zygote
(tests/snakemake_zygote.py) sys.executable is this server's shim, a small script that asks the server for a child. The
child takes the shim's working directory, environment, arguments, stdin, stdout and stderr, and runs the script as
`python script.py` does (as __main__, its directory first on sys.path); its exit code, or the signal that ended it, is
the shim's. Signals sent to the shim go to the child, and a shim killed outright (kill -9) takes its child with it.
The workflow's own code (embinit, the Snakefile) is imported in each child, never here. The shim runs the real
interpreter (exec) for anything else (`-m snakemake` of a group or SLURM job, pip), for a job whose environment changes
how an interpreter starts (a PYTHON* variable other than the server's, PYTHONPATH aside: its folders go on the child's
sys.path), and while the server is not listening.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

# what the workflow's scripts import besides embinit: the training stack, the reports' tables and figures, the data
# stage's tokenizers and hub clients, and snakemake.script, which a script's preamble imports
PRELOADED = (
    "numpy",
    "pandas",
    "pyarrow.parquet",
    "scipy.stats",
    "torch",
    "torch._dynamo",
    "yaml",
    "jsonschema",
    "sacrebleu",
    "tokenizers",
    "safetensors.numpy",
    "huggingface_hub",
    "tqdm",
    "matplotlib",
    "snakemake.script",
)
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")

SHIM = '''#!{real} -IS
"""A Python for Snakemake's script jobs: each runs in a child of the job zygote {socket} (tests/job_zygote.py)."""
import json, os, signal, socket, sys

REAL, SOCKET, START_VARS = {real!r}, {socket!r}, {start_vars!r}
FORWARDED = {forwarded!r}


def real():
    os.execv(REAL, [REAL, *sys.argv[1:]])


args = sys.argv[1:]
env = dict(os.environ)
script = os.path.abspath(args[0]) if args else ""
if not (script.endswith(".py") and "/.snakemake/scripts/tmp" in script):
    real()
if {{k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}} != START_VARS:
    real()
try:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(SOCKET)
    socket.send_fds(conn, [json.dumps({{"argv": args, "cwd": os.getcwd(), "env": env}}).encode()], [0, 1, 2])
except OSError:
    real()
child, pending = [], []


def forward(signum, frame):
    if not child:
        pending.append(signum)
        return
    try:
        os.kill(child[0], signum)
    except ProcessLookupError:
        pass


for name in FORWARDED:
    signal.signal(getattr(signal, name), forward)
child.append(int(conn.recv(64)))
for signum in pending:
    forward(signum, None)
reply = conn.recv(64)
code = int(reply) if reply else -signal.SIGKILL
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
'''


class JobZygote:
    """The pytest side: the server, started in the background (until it listens, jobs run in real interpreters),
    and the shim that hands it Snakemake's script jobs."""

    def __init__(self, env: dict[str, str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="job-zygote-"))
        self.socket = self.dir / "socket"
        self.proc = subprocess.Popen([sys.executable, __file__, str(self.socket)], stdin=subprocess.PIPE, env=env)
        self.python = self.dir / "python"
        start_vars = {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}
        text = SHIM.format(real=sys.executable, socket=str(self.socket), start_vars=start_vars, forwarded=FORWARDED)
        self.python.write_text(text)
        self.python.chmod(0o755)

    def close(self) -> None:
        self.proc.stdin.close()  # the server ends at the end of its input
        self.proc.wait(timeout=30)
        with contextlib.suppress(OSError):
            for path in (self.python, self.socket):
                path.unlink(missing_ok=True)
            self.dir.rmdir()


def _serve(path: str) -> dict | None:
    """The server's loop, until its stdin ends: a supervisor child per shim that connects. Returns the request in the
    job's process, None in the server at the end."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".new")
    os.rename(path + ".new", path)  # a shim sees no socket until it listens
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the supervisors are reaped as they end
    while True:
        ready, _, _ = select.select([listener, 0], [], [])
        if 0 in ready and not os.read(0, 4096):
            return None
        if listener in ready:
            conn, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                return _supervise(conn)
            conn.close()


def _supervise(conn: socket.socket) -> dict:
    """Fork the job; tell the shim its pid, then its exit code (-N: signal N); kill it if the shim goes first.
    Returns the request in the job's process; the supervisor exits here."""
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if not message or len(fds) != 3:
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        conn.close()
        return {**json.loads(message), "fds": fds}
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    ended = os.pidfd_open(pid)
    ready, _, _ = select.select([conn, ended], [], [])
    if ended not in ready:  # the shim sends nothing more: its socket readable means it is gone, and so goes its job
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


def _become(request: dict) -> str:
    """Make this child the process `python <script> <args>` would be in the shim's directory, environment and files;
    returns the script's path."""
    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    server_path = _entries(os.environ.get("PYTHONPATH"))
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read again from TMPDIR (Snakemake's resources.tmpdir)
    sys.argv = request["argv"]
    script = sys.argv[0]
    # `python script.py`: the script's directory first, then PYTHONPATH's entries (the Snakefile adds its own folder)
    rest = sys.path[1 + len(server_path) :]
    sys.path[:] = dict.fromkeys(
        [os.path.dirname(os.path.realpath(script)), *_entries(os.environ.get("PYTHONPATH")), *rest]
    )
    return script


def _entries(pythonpath: str | None) -> list[str]:
    """PYTHONPATH's folders as an interpreter puts them on sys.path (absolute, without empty entries)."""
    return [os.path.abspath(p) for p in (pythonpath or "").split(os.pathsep) if p]


if __name__ == "__main__":
    for library in PRELOADED:
        importlib.import_module(library)
    sys.stdout.flush()
    job = _serve(sys.argv[1])
    if job is not None:
        runpy.run_path(_become(job), run_name="__main__")
