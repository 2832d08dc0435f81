"""Small file helpers shared by every stage: outputs appear whole or not at all."""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    An interrupted or failing job therefore never leaves a half-written output behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # keep the real name as the suffix, so writers that add an extension (np.save) leave it alone
    fd, tmp = tempfile.mkstemp(prefix=".tmp.", suffix=f".{path.name}", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def sha256_of(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
