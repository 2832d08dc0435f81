"""SLURM site settings (config `cluster`) as job resources, packs of runs, and a check of every job's request
against the cluster's partitions."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

Item = TypeVar("Item")

PLACEHOLDERS = {"your_account", "myproj", "changeme"}


def job_resources(cluster: dict, gpu: bool) -> dict:
    """The sbatch resources a CPU or a training job gets from config `cluster`; an unset key leaves SLURM's default."""
    model = cluster["gpu_model"]
    wanted = {
        "slurm_account": cluster["account"],
        "slurm_partition": cluster["gpu_partition" if gpu else "cpu_partition"],
        # a string, so a group of k training jobs shares this one GPU (Snakemake sums a group's numbers)
        "gres": (f"gpu:{model}:1" if model else "gpu:1") if gpu else None,
    }
    return {key: value for key, value in wanted.items() if value is not None}


def packs(runs: list[Item], k: int, by: Callable[[Item], Any] | None = None) -> list[list[Item]]:
    """`runs` in order, k to a pack (the last may hold fewer); `by`: a key whose runs share packs only with each other
    (a stacked pack holds one block's runs), each key's runs in order of their first."""
    groups: dict[Any, list[Item]] = {}
    for run in runs:
        groups.setdefault(by(run) if by else None, []).append(run)
    return [group[i : i + k] for group in groups.values() for i in range(0, len(group), k)]


def partitions() -> dict[str, dict]:
    """Each partition as sinfo reports its nodes: the largest node's CPUs and memory (MB), every gres, the default,
    its time limit in minutes (None: none)."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%P|%c|%m|%G|%l"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    found: dict[str, dict] = {}
    for line in out.splitlines():
        name, cpus, mem, gres, limit = line.strip().split("|")
        best = found.setdefault(
            name.rstrip("*"),
            {"cpus": 0, "mem_mb": 0, "gres": set(), "default": name.endswith("*"), "minutes": minutes(limit)},
        )
        best["cpus"] = max(best["cpus"], int(cpus.rstrip("+")))
        best["mem_mb"] = max(best["mem_mb"], int(mem.rstrip("+")))
        best["gres"] |= {g.split("(")[0] for g in gres.split(",") if g != "(null)"}
    return found


def minutes(limit: str) -> int | None:
    """A SLURM time limit ([days-]hours:minutes:seconds, minutes:seconds, or infinite) in whole minutes."""
    if limit.lower() in ("infinite", "unlimited", "n/a"):
        return None
    days, _, clock = limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    hours, mins, secs = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
    return int(days or 0) * 1440 + hours * 60 + mins + (secs > 0)


def requests_of(jobs: Iterable[Any]) -> dict[str, dict]:
    """Each rule's largest request among Snakemake `jobs` that a cluster executor submits (localrules run where
    Snakemake does): CPUs, memory (MB), runtime (minutes), partition and gres."""
    found: dict[str, dict] = {}
    for job in jobs:
        if job.is_local:
            continue
        resources = job.resources
        request = found.setdefault(job.rule.name, {"cpus": 0, "mem_mb": 0, "runtime": 0})
        request["cpus"] = max(request["cpus"], int(job.threads))
        for name in ("mem_mb", "runtime"):
            value = resources.get(name)
            if isinstance(value, int):
                request[name] = max(request[name], value)
        for name in ("slurm_partition", "gres"):
            if resources.get(name) is not None:
                request[name] = resources.get(name)
    return found


def problems(cluster: dict, requests: dict[str, dict], available: dict[str, dict]) -> list[str]:
    """What sbatch would refuse or leave PENDING forever, each naming the config key or rule resource to change."""
    found = []
    if str(cluster["account"]).lower() in PLACEHOLDERS:
        found.append(f"config cluster.account is the placeholder {cluster['account']!r}: set your sbatch account")
    for rule, request in requests.items():
        key = "cluster.gpu_partition" if "gres" in request else "cluster.cpu_partition"
        name = request.get("slurm_partition")
        if name is None:
            name = next((p for p, part in available.items() if part["default"]), None)
        if name is None:
            continue
        part = available.get(name)
        if part is None:
            found.append(f"config {key} = {name!r}: no such partition (sinfo lists {', '.join(sorted(available))})")
            continue
        for resource in ("cpus", "mem_mb"):
            if request.get(resource, 0) > part[resource]:
                found.append(
                    f"rule {rule} asks for {resource}={request[resource]} but partition {name!r}'s largest node "
                    f"has {part[resource]}"
                )
        if part.get("minutes") is not None and request.get("runtime", 0) > part["minutes"]:
            found.append(
                f"rule {rule} asks for runtime={request['runtime']} (minutes) but partition {name!r}'s time "
                f"limit is {part['minutes']}"
            )
        if "gres" in request and not _gres_fits(request["gres"], part["gres"]):
            found.append(
                f"rule {rule} asks for --gres={request['gres']} (config cluster.gpu_model = {cluster['gpu_model']!r}) "
                f"but partition {name!r} has gres {', '.join(sorted(part['gres'])) or 'none'}"
            )
    return found


def _gres_fits(request: str, offered: set[str]) -> bool:
    """Whether a gres request like gpu:a100:1 names a gres (and type) some node of the partition has."""
    name, *rest = request.split(":")
    wanted_type = rest[0] if len(rest) == 2 else None
    for gres in offered:
        kind, *parts = gres.split(":")
        if kind == name and (wanted_type is None or (len(parts) == 2 and parts[0] == wanted_type)):
            return True
    return False


def check_requests(cluster: dict, requests: dict[str, dict]) -> None:
    """Fail before any submission when the settings cannot be scheduled here (does nothing where sinfo is absent)."""
    if shutil.which("sinfo") is None:
        return
    found = problems(cluster, requests, partitions())
    if found:
        raise SystemExit("SLURM settings that cannot run on this cluster:\n  " + "\n  ".join(found))
