"""Small file helpers shared by every stage: outputs appear whole or not at all."""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path
from typing import Iterator


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
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def sha256_of(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
