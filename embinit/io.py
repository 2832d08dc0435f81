"""Small file helpers shared by every stage: outputs appear whole or not at all."""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import re
import secrets
import shutil
import warnings
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    An interrupted or failing job therefore never leaves a half-written output behind. The temporary file
    is created with mode 0666 minus the umask (unlike mkstemp's 0600), so collaborators sharing a results
    directory can read what the pipeline writes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # keep the real name as the suffix, so writers that add an extension (np.save) leave it alone
    tmp = path.parent / f".tmp.{secrets.token_hex(6)}.{path.name}"
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        yield tmp
        os.replace(tmp, path)
    except DiskFullError:
        raise
    except (OSError, RuntimeError) as err:  # RuntimeError: torch.save's writer, which keeps no errno
        full = is_disk_full(path.parent, err)  # before the partial file goes and frees its bytes
        tmp.unlink(missing_ok=True)
        if full:
            raise DiskFullError(path, shutil.disk_usage(path.parent).free) from err
        raise
    finally:
        tmp.unlink(missing_ok=True)


# below this many free bytes a failed write whose error lost its errno (numpy's `N requested and M written`,
# torch's `unexpected pos`) is taken as disk full
FULL_BELOW = 1 << 20


def is_disk_full(directory: str | os.PathLike, err: BaseException) -> bool:
    """Whether a write in `directory` that raised `err` failed for want of space (or of quota)."""
    return getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or shutil.disk_usage(directory).free < FULL_BELOW


def human_size(n: int) -> str:
    """'1.2 GiB', '617.0 KiB', '12 B'."""
    for power, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 2**power:
            return f"{n / 2**power:.1f} {unit}"
    return f"{n} B"


class DiskFullError(OSError):
    """A write that failed, or a job that would fail, for want of disk space; str() is one line naming the file or
    directory, the free space, what the job needs when known, and the fix."""

    def __init__(self, path: str | os.PathLike, free: int, needs: int | None = None, before: bool = False):
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        self.path, self.free, self.needs, self.before = Path(path), free, needs, before

    def __str__(self) -> str:
        needs = f", the run needs about {human_size(self.needs)}" if self.needs else ""
        fix = "free space on that disk, or point results_dir (data_dir) to a larger one, then run again"
        if self.before:
            return f"disk full: {self.path} has {human_size(self.free)} free{needs}; stopped before any work: {fix}"
        return f"disk full writing {self.path}: {human_size(self.free)} free{needs}; {fix}"


@contextlib.contextmanager
def disk_space(directory: str | os.PathLike, needs: int) -> Iterator[None]:
    """Stop at once when `directory`'s disk has less than `needs` bytes free, before work that a full disk would
    throw away; a disk-full error of a write inside the block names `needs` too."""
    free = shutil.disk_usage(directory).free
    if free < needs:
        raise DiskFullError(directory, free, needs, before=True)
    try:
        yield
    except DiskFullError as err:
        err.needs = needs
        raise


def interrupted_writes(directory: str | os.PathLike) -> list[Path]:
    """The temporary files `atomic_path` left in `directory` when a process was killed while writing."""
    return sorted(p for p in Path(directory).glob(".tmp.*") if re.fullmatch(r"\.tmp\.[0-9a-f]{12}\..+", p.name))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


class DamagedFileError(ValueError):
    """An input file that cannot be read as the format its name says; str() is one line naming it and the fix."""


@contextlib.contextmanager
def reading(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn any failure of a library parsing `path` (a cut, empty or foreign file) into one DamagedFileError line.

    Libraries name no file (safetensors' `incomplete metadata`, torch's `[Errno 22]`, tokenizers' `EOF while
    parsing`), and their messages may span lines; the block should hold the library call only.
    """
    try:
        yield
    except DamagedFileError:
        raise
    except Exception as err:
        raise damaged(path, what, f"{type(err).__name__}: {err}") from None


def damaged(path: str | os.PathLike, what: str, reason: str) -> DamagedFileError:
    """The error for a file that is not a readable `what`, with the fix: remove it so the next run fetches it anew."""
    reason = " ".join(reason.split())
    reason = reason if len(reason) <= 200 else reason[:197] + "..."
    return DamagedFileError(
        f"{path}: not a readable {what} ({reason}); it is damaged, cut short or another format: delete it "
        f"(rm {path}) and run again to fetch it afresh (if the mirror's copy is bad too, replace that)"
    )


@contextlib.contextmanager
def job_log(path: str | os.PathLike) -> Iterator[None]:
    """Send the block's Python logging (INFO and up), warnings and stdout/stderr to the file `path` (appended).

    For a Snakemake script: `with job_log(snakemake.log[0]): ...`. Warnings keep the active filters and are
    logged as the `py.warnings` logger's. An exception escaping the block is logged with its traceback before it
    propagates, so the log file says why the job failed. Logging, warnings and streams are restored after.
    """

    def log_warning(message, category, filename, lineno, file=None, line=None) -> None:
        text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
        logging.getLogger("py.warnings").warning(text)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    with open(path, "a", encoding="utf-8", buffering=1) as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        level = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
                warnings.showwarning = log_warning  # catch_warnings restores the previous one
                try:
                    yield
                except Exception:
                    logging.getLogger(__name__).exception("failed")
                    raise
        finally:
            root.removeHandler(handler)
            root.setLevel(level)


@functools.cache
def _parquet_problem(path: str, size: int, mtime_ns: int) -> str | None:
    try:
        pq.read_metadata(path)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        return f"{path} is not a readable Parquet file ({err})"
    return None


def parquet_problem(path: str | os.PathLike) -> str | None:
    """Why a Parquet file a job will read cannot be read (its footer, checked once per size and mtime); None when
    it reads or is absent (its job makes it)."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return _parquet_problem(str(path), stat.st_size, stat.st_mtime_ns)
