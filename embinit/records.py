"""What made an output, kept beside it in the results directory, and the lock on that directory.

Snakemake reruns a job whose params changed only while its own records (.snakemake/metadata) are there; from
another working directory, or after they are deleted, a stale output would look current. So a run's final.json and
a layer's sidecar hold the digest of the spec their job ran with, and the workflow compares it with the planned one
while it builds the DAG (`plan`, called by the input functions of rules/common.smk).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from embinit.io import write_text_atomic


def spec_digest(spec: dict) -> str:
    """Short sha256 of the spec as canonical JSON: equal specs give equal digests in any process."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def sidecar_of(output: str | os.PathLike) -> Path:
    """`x.npy` -> `x.npy.spec.json`: where an output without a record of its own keeps its digest."""
    return Path(f"{output}.spec.json")


def write_sidecar(output: str | os.PathLike, spec: dict) -> None:
    """Record the spec that made `output`; written after the output, so a kill between the two leaves the old
    digest and the output is rebuilt, never a new digest beside an old output."""
    write_text_atomic(sidecar_of(output), json.dumps({"spec_digest": spec_digest(spec)}) + "\n")


UNREADABLE = "unreadable"


def recorded_digest(record: str | os.PathLike) -> str | None:
    """The `spec_digest` a JSON record holds; None when it is absent or holds none (records older than digests);
    UNREADABLE when it is not a JSON object (cut or corrupt: its job reruns)."""
    try:
        data = json.loads(Path(record).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return UNREADABLE
    return data.get("spec_digest") if isinstance(data, dict) else UNREADABLE


def stale_reason(record: str | os.PathLike, spec: dict) -> str | None:
    """Why the output `record` stands for is stale against the planned `spec`, or None when it is not (or no
    digest says)."""
    recorded, planned = recorded_digest(record), spec_digest(spec)
    if recorded is None or recorded == planned:
        return None
    if recorded == UNREADABLE:
        return f"{record} is not a readable JSON record"
    return f"{record} was made by spec {recorded}, the config now plans {planned}"


_SAID: set[str] = set()


def plan(planned: str | os.PathLike, record: str | os.PathLike, spec: dict) -> str:
    """Write `spec` to `planned`, a file the job takes as input, and date it now when `record` is stale against
    it (the job then reruns by mtime, whatever .snakemake/ holds; the run says why on stderr) and at the epoch
    otherwise (it triggers nothing). Returns `planned`."""
    planned = Path(planned)
    text = json.dumps({"spec_digest": spec_digest(spec), "spec": spec}, indent=1, sort_keys=True, default=str)
    if not planned.is_file() or planned.read_text(encoding="utf-8") != text + "\n":
        write_text_atomic(planned, text + "\n")
    reason = stale_reason(record, spec)
    stamp = time.time() if reason else 0
    os.utime(planned, (stamp, stamp))
    if reason and reason not in _SAID:  # input functions run more than once per job
        _SAID.add(reason)
        print(f"embinit: stale output, its job reruns: {reason}", file=sys.stderr)
    return str(planned)


class ResultsLock:
    """An exclusive lock on a results directory, held by the one snakemake process that runs its jobs: a second
    run on the same directory from another working directory (where Snakemake's own lock is another file) stops.
    The kernel drops it when the process ends, killed or not."""

    NAME = ".embinit.lock"

    def __init__(self, results_dir: str | os.PathLike):
        self.path = Path(results_dir).absolute() / self.NAME
        self._file = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RuntimeError(
                f"results directory {self.path.parent} is in use by {holder} (lock file {self.path}); wait for that "
                "run to end, or give this one another results_dir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"snakemake pid {os.getpid()} on {socket.gethostname()} in {Path.cwd()}\n")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock; the file stays, empty of meaning
            self._file = None
