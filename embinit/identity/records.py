"""What made an output, kept beside it in the results directory, and the lock on that directory.

Snakemake reruns a job whose params changed only while its own records (.snakemake/metadata) are there; from
another working directory, or after they are deleted, a stale output would look current. So a run's final.json and
a layer's sidecar hold the digest of the spec their job ran with, and the workflow compares it with the planned one
before it builds the DAG (embinit.workflow.staleness). An aggregate (a table, a figure) keeps the digest of the
records it read (runs' final.json and metrics, the tables compared): a record missing or changed since it was built
makes it stale (`aggregate_stale_reason`). Snakemake alone keeps a table whose inputs were deleted (as it keeps
outputs downstream of a temp() file): nothing would rerun the lost run.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from embinit.io import write_text_atomic
from embinit.identity.digests import sha256_of, text_digest


def sidecar_of(output: str | os.PathLike) -> Path:
    """`x.npy` -> `x.npy.spec.json`: where an output without a record of its own keeps its digest."""
    return Path(f"{output}.spec.json")


def write_sidecar(output: str | os.PathLike, digest: str) -> None:
    """Record the digest of the spec that made `output`; written after the output, so a kill between the two leaves
    the old digest and the output is rebuilt, never a new digest beside an old output."""
    write_text_atomic(sidecar_of(output), json.dumps({"spec_digest": digest}) + "\n")


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


def stale_reason(record: str | os.PathLike, planned: str, output: str | os.PathLike | None = None) -> str | None:
    """Why the output `record` stands for (`output`, when it is another file) is stale against the planned spec's
    digest, or None when it is not (or no digest says). An output whose record is missing is stale."""
    if output is not None and Path(output).is_file() and not Path(record).is_file():
        return f"{output} has no record {record}"
    recorded = recorded_digest(record)
    if recorded is None or recorded == planned:
        return None
    if recorded == UNREADABLE:
        return f"{record} is not a readable JSON record"
    return f"{record} was made by spec {recorded}, the config now plans {planned}"


def code_stale_reason(record: str | os.PathLike, current: str, accepted: list[str]) -> str | None:
    """Why the run record `record` is stale for its code: it names training code (`training_code`) that is neither
    `current` nor one of the digests its result set `accepted` (their leading hex digits); None when it is not, or
    when it is missing, unreadable or names none (the spec check decides those)."""
    try:
        made_by = json.loads(Path(record).read_text(encoding="utf-8")).get("training_code")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(made_by, str) or made_by == current or any(made_by.startswith(a) for a in accepted):
        return None
    return (
        f"{record} was made by training code {made_by[:8]}, the code now is {current[:8]}, and config "
        f"accepted_training_code does not list {made_by[:8]}"
    )


_HASHED: dict[tuple[str, int, int], str] = {}


def records_digest(records: list[str]) -> str:
    """Short sha256 over the records' contents, in the order of their paths (each file hashed once per size and
    mtime): the same in a moved or copied results directory."""
    parts = []
    for record in sorted(records):
        stat = os.stat(record)
        key = (str(record), stat.st_size, stat.st_mtime_ns)
        if key not in _HASHED:
            _HASHED[key] = sha256_of(record)
        parts.append(_HASHED[key])
    return text_digest("\n".join(parts), 16)


def aggregate_stale_reason(output: str | os.PathLike, records: list[str], code: str | None = None) -> str | None:
    """Why the aggregate `output` is stale: a record it read is missing, the records changed since it was built, or
    the code that builds it (`code`, its report code digest) did (its sidecar says; one built before sidecars is
    judged by the first alone, one whose sidecar holds no code digest by its records). None when it is current or
    absent."""
    if not Path(output).is_file():
        return None
    missing = [r for r in records if not Path(r).is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"{output} was built from {missing[0]}{more}, now missing"
    try:
        sidecar = json.loads(sidecar_of(output).read_text(encoding="utf-8"))
        recorded, built_by = sidecar.get("records_digest"), sidecar.get("report_code")
    except (OSError, ValueError, AttributeError):
        recorded = built_by = None
    if recorded is not None and recorded != records_digest(records):
        return f"{output}: the records it was built from changed since"
    if code is not None and built_by is not None and built_by != code:
        return f"{output}: the code that builds it (embinit/reports) changed since ({built_by} -> {code})"
    return None


def write_aggregate_sidecar(output: str | os.PathLike, records: list[str], code: str | None = None) -> None:
    """Record the digest of the records that `output` was just built from, and of the code that built it."""
    kept = {"records_digest": records_digest(records), **({"report_code": code} if code else {})}
    write_text_atomic(sidecar_of(output), json.dumps(kept) + "\n")


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

    def holder(self) -> str | None:
        """Who holds the lock now ("snakemake pid ... on ... in ..."), else None; takes nothing and writes nothing."""
        if not self.path.is_file():
            return None
        with open(self.path, encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)  # refused while a run holds it exclusively
            except BlockingIOError:
                return handle.read().strip() or "another process"
        return None  # closing dropped the shared lock

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock; the file stays, empty of meaning
            self._file = None
