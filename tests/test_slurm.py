"""A real one-node SLURM (.ci/slurm-local): the tiny grid through profiles/slurm, training packed on the GPU
partition (rule pack), a pack cut by its time limit, and requests the cluster cannot run."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, TINY_REMOTES, run_snakemake, write_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="a local SLURM needs root (it installs packages and runs slurmd)"),
    pytest.mark.skipif(
        shutil.which("slurmctld") is None and shutil.which("apt-get") is None,
        reason="neither slurmctld nor apt-get (to install Debian's slurmctld, slurmd and munge) is here",
    ),
]
SLURM_LOCAL = REPO / ".ci" / "slurm-local"
# the README's option for a cluster without accounting; the first status check after 5 s (the executor adds 10 s a
# round while nothing finishes: checks at 5, 20, 45 s suit this test's 20-40 s jobs)
NO_ACCOUNTING = ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "5"]
FIELDS = ["id", "partition", "gres", "comment", "cpus", "memory", "time_limit", "state"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running one-node SLURM; stops the daemons it started."""
    state = tmp_path_factory.mktemp("slurm")
    try:
        up = subprocess.run([SLURM_LOCAL, "up", state], capture_output=True, text=True, timeout=240)
        assert up.returncode == 0, up.stdout + up.stderr
        yield state
    finally:
        subprocess.run([SLURM_LOCAL, "down", state], check=True, timeout=60)


def slurm_jobs() -> pd.DataFrame:
    """Every job slurmctld still holds (finished ones stay MinJobAge = 300 s): squeue's view, with no sacct."""
    out = subprocess.run(
        ["squeue", "-t", "all", "-h", "-o", "%i|%P|%b|%k|%C|%m|%l|%T"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return pd.DataFrame([line.split("|") for line in out.splitlines()], columns=FIELDS)


# the CPU stages in one allocation: the executor's status polling (+10 s a round) is paid once, not per stage
CPU_GROUP = [
    "--groups",
    *[f"{rule}=cpu" for rule in ("prepare_sst2", "vocab_sst2", "extract_embeddings", "initialize_embedding")],
]


def packed_on_slurm(cfg: Path) -> list[str]:
    """The profile with the README's per-call site settings (they add to the profile and the rules' own resources):
    an a100 and packs of two runs."""
    return [
        "--profile",
        str(REPO / "profiles/slurm"),
        "--configfile",
        str(cfg),
        "--config",
        "cluster={gpu_model: a100, pack: 2}",
    ]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One working directory for the packing tests: the cut pack reuses the data the first pack's grid prepared."""
    return tmp_path_factory.mktemp("slurm_runs")


def tiny_grid(path, mirror, seeds=1, **blocks):
    """The tiny SST-2 grid (Xavier and Pretrained, `seeds` seeds, one epoch), `blocks` added to it."""
    sst2 = {"seeds": seeds, "epochs": 1, "batch_size": 8, "initializers": ["Xavier", "Pretrained"]}
    return write_config(
        path,
        {
            "mirror": str(mirror),
            "run_blocks": ["sst2_glove6b50d", *blocks],
            "remotes": TINY_REMOTES,
            "model": {"max_len": 64},
            # the GPUs are stand-in files: SLURM still sets CUDA_VISIBLE_DEVICES, and `auto` would refuse a GPU torch
            # cannot use (train.device, docs/reliability.md)
            "train": {"device": "cpu"},
            "outputs": ["table1"],
            "blocks": {"sst2_glove6b50d": sst2, **blocks},
        },
    )


def test_slurm_trains_the_packed_runs_at_the_same_time_on_one_gpu_of_the_gpu_partition(workdir, tiny_mirror, slurm):
    tmp_path = workdir
    before = set(slurm_jobs()["id"])
    cfg = tiny_grid(tmp_path / "c.yaml", tiny_mirror)
    run_snakemake(
        [
            "results/table1.csv",
            *packed_on_slurm(cfg),
            *CPU_GROUP,
            "--slurm-keep-successful-logs",
            *NO_ACCOUNTING,
        ],
        cwd=tmp_path,
        timeout=300,
    )
    table1 = pd.read_csv(tmp_path / "results/table1.csv")
    assert set(table1["initializer"]) == {"Xavier", "Pretrained"}

    jobs = slurm_jobs()
    jobs = jobs[~jobs["id"].isin(before)]
    packed = jobs[jobs["comment"].str.startswith("rule_pack_")]
    other = jobs[~jobs["comment"].str.startswith("rule_pack_")]
    # both runs in one allocation holding one a100 of the gpu partition: twice train's memory, one run's runtime
    assert len(packed) == 1 and not other["comment"].str.startswith("rule_train_").any(), jobs.to_string()
    job = packed.iloc[0]
    assert (job["partition"], job["gres"], job["state"]) == ("gpu", "gres:gpu:a100:1", "COMPLETED"), jobs.to_string()
    assert (job["cpus"], job["memory"], job["time_limit"]) == ("4", "32000M", "30:00"), jobs.to_string()
    assert len(other) and set(other["partition"]) == {"cpu"} and set(other["gres"]) == {"N/A"}, jobs.to_string()
    # each run its own Snakemake job inside the allocation, and the two trained at the same time
    log = next((tmp_path / "results/.packs").rglob("pack0.log")).read_text()
    assert len(set(re.findall(r"output: (\S+/final\.json)", log))) == 2, log
    # both started before either finished (the toy runs train for under a second, so their log times can miss)
    started = [m.start() for m in re.finditer(r"rule train:", log)]
    assert len(started) == 2 and max(started) < log.index("Finished jobid"), log


def test_a_pack_cut_by_its_time_limit_keeps_the_run_it_finished_and_says_timeout(workdir, tiny_mirror, slurm):
    """A 1-epoch run (about 20 s) packed with a long one under a 1-minute limit: SLURM ends the pack, the finished
    run stays. (In the packing test's directory: its prepared data serve, or this run's CPU job prepares them.)"""
    tmp_path = workdir
    long = {"task": "sst2", "sources": {"encoder": "glove6b50d"}, "family": "GloVe", "epochs": 100000, "seeds": 1}
    long |= {"batch_size": 8}
    # seed 1: a run the packing test did not train
    cfg = tiny_grid(tmp_path / "cut.yaml", tiny_mirror, seeds=2, sst2_long=long | {"initializers": ["Xavier"]})
    done, cut = "results/sst2_glove6b50d/Xavier/seed1/base", "results/sst2_long/Xavier/seed0/base"
    proc = run_snakemake(
        [
            f"{done}/final.json",
            f"{cut}/final.json",
            *packed_on_slurm(cfg),
            "--set-resources",
            "train:runtime=1",
            "--retries",
            "0",
            *CPU_GROUP,
            *NO_ACCOUNTING,
        ],
        cwd=tmp_path,
        check=False,
        timeout=600,
    )
    main_log = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "SLURM status is: 'TIMEOUT'" in main_log, main_log[-3000:]
    assert (tmp_path / done / "final.json").is_file(), main_log[-3000:]
    assert not (tmp_path / cut / "final.json").exists() and (tmp_path / cut / "checkpoint.pt").is_file()
    # Snakemake's own records have the finished run complete: nothing of it reruns
    again = run_snakemake([f"{done}/final.json", "-n", "--configfile", str(cfg)], cwd=tmp_path)
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            ["--config", "cluster={account: your_account, gpu_model: h100}", "--set-resources", "train:mem_mb=900000"],
            [
                "cluster.account is the placeholder 'your_account'",
                "--gres=gpu:h100:1",
                "rule pack asks for mem_mb=1800000 but partition 'gpu''s largest node has 65536",
            ],
        ),
        (
            ["--config", "cluster={gpu_partition: gpus}", "--set-threads", "train=64"],
            ["cluster.gpu_partition = 'gpus'"],
        ),
        (["--set-threads", "train=32"], ["rule pack asks for cpus=64 but partition 'gpu''s largest node has 16"]),
        # any rule's request, not only training's
        (
            ["--set-resources", "prepare_sst2:mem_mb=100000"],
            ["rule prepare_sst2 asks for mem_mb=100000 but partition 'cpu''s largest node has 65536"],
        ),
    ],
)
def test_slurm_settings_the_cluster_cannot_run_fail_before_any_submission_naming_them(
    tmp_path, tiny_mirror, slurm, overrides, named
):
    before = set(slurm_jobs()["id"])
    cfg = tiny_grid(tmp_path / "c.yaml", tiny_mirror)
    args = ["results/table1.csv", "--profile", str(REPO / "profiles/slurm"), "--configfile", str(cfg), *overrides]
    proc = run_snakemake([*args, *NO_ACCOUNTING], cwd=tmp_path, check=False, timeout=120)
    assert proc.returncode != 0
    assert all(part in proc.stderr + proc.stdout for part in named), proc.stderr[-3000:]
    # nothing submitted, nothing left PENDING (finished jobs leave squeue MinJobAge = 300 s after they end)
    assert set(slurm_jobs()["id"]) <= before


def test_slurm_local_up_again_starts_nothing_and_reuses_the_running_daemons(slurm):
    started = (slurm / "started").read_text()
    assert {line.split()[0] for line in started.splitlines()} >= {"slurmctld", "slurmd"}
    again = subprocess.run([SLURM_LOCAL, "up", slurm], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert (slurm / "started").read_text() == started
