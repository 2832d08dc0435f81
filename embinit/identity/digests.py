"""The hashes every identity is made of: a file's sha256, a text's, a spec's as canonical JSON."""

from __future__ import annotations

import hashlib
import json
import os


def sha256_of(path: str | os.PathLike) -> str:
    """A file's sha256, as `sha256sum` prints it."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def text_digest(text: str, length: int = 64) -> str:
    """The first `length` hex digits of the sha256 of `text` (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def spec_digest(spec: dict) -> str:
    """Short sha256 of the spec as canonical JSON: equal specs give equal digests in any process."""
    return text_digest(json.dumps(spec, sort_keys=True, default=str), 16)
