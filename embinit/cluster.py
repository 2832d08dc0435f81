"""SLURM site settings (config `cluster`) as job resources, and a check of them against the cluster's partitions."""

from __future__ import annotations

import shutil
import subprocess

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


def partitions() -> dict[str, dict]:
    """Each partition as sinfo reports its nodes: the largest node's CPUs and memory (MB), every gres, the default."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%P|%c|%m|%G"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    found: dict[str, dict] = {}
    for line in out.splitlines():
        name, cpus, mem, gres = line.strip().split("|")
        best = found.setdefault(
            name.rstrip("*"), {"cpus": 0, "mem_mb": 0, "gres": set(), "default": name.endswith("*")}
        )
        best["cpus"] = max(best["cpus"], int(cpus.rstrip("+")))
        best["mem_mb"] = max(best["mem_mb"], int(mem.rstrip("+")))
        best["gres"] |= {g.split("(")[0] for g in gres.split(",") if g != "(null)"}
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
        for resource, limit in (("cpus", "cpus"), ("mem_mb", "mem_mb")):
            if request.get(resource, 0) > part[limit]:
                found.append(
                    f"rule {rule} asks for {resource}={request[resource]} but partition {name!r}'s largest node "
                    f"has {part[limit]}"
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


def check_packed_training(cluster: dict, k: int, cores: int, mem_mb: int) -> None:
    """profiles/slurm: k training runs packed in one job (--group-components train=k) and every other job, checked
    against the cluster before any submission."""
    train = {"cpus": k * cores, "mem_mb": k * mem_mb, **job_resources(cluster, gpu=True)}
    check(
        cluster,
        {f"train x{k} (group-components train={k})": train, "of every other job": job_resources(cluster, gpu=False)},
    )


def check(cluster: dict, requests: dict[str, dict]) -> None:
    """Fail before any submission when the settings cannot be scheduled here (does nothing where sinfo is absent)."""
    if shutil.which("sinfo") is None:
        return
    found = problems(cluster, requests, partitions())
    if found:
        raise SystemExit("SLURM settings that cannot run on this cluster:\n  " + "\n  ".join(found))
