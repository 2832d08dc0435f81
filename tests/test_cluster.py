"""SLURM site settings (config `cluster`) as job resources, checked against partitions as sinfo reports them."""

import pytest

from types import SimpleNamespace

from embinit.workflow.cluster import job_resources, minutes, packs, problems, requests_of

SITE = {"account": "proj1", "gpu_partition": "gpu", "gpu_model": "a100"}
PARTITIONS = {
    "cpu": {"cpus": 16, "mem_mb": 65536, "gres": set(), "default": True},
    "gpu": {"cpus": 32, "mem_mb": 256000, "gres": {"gpu:a100:4", "shard:32"}, "default": False, "minutes": 2880},
}


def test_unset_settings_leave_slurm_its_defaults_and_a_model_names_the_gres_type():
    assert job_resources(SITE, gpu=True) == {"slurm_account": "proj1", "slurm_partition": "gpu", "gres": "gpu:a100:1"}
    anywhere = {"account": None, "gpu_partition": None, "gpu_model": None}
    assert job_resources(anywhere, gpu=True) == {"gres": "gpu:1"}


def test_a_request_the_partition_can_hold_has_no_problems():
    request = {"cpus": 8, "mem_mb": 64000, **job_resources(SITE, gpu=True)}
    assert problems(SITE, {"train": request}, PARTITIONS) == []


@pytest.mark.parametrize(
    ("site", "request_", "message"),
    [
        ({"account": "your_account"}, {}, "cluster.account is the placeholder 'your_account'"),
        ({"gpu_partition": "gpus"}, {}, "config cluster.gpu_partition = 'gpus': no such partition (sinfo lists cpu"),
        ({"gpu_model": "h100"}, {}, "--gres=gpu:h100:1 (config cluster.gpu_model = 'h100') but partition 'gpu' has"),
        ({}, {"cpus": 33}, "rule train asks for cpus=33 but partition 'gpu''s largest node has 32"),
        ({}, {"mem_mb": 300000}, "rule train asks for mem_mb=300000 but partition 'gpu''s largest node has 256000"),
        ({"gpu_partition": None}, {}, "partition 'cpu' has gres none"),  # the default partition, without GPUs
        ({}, {"runtime": 3000}, "rule train asks for runtime=3000 (minutes) but partition 'gpu''s time limit is 2880"),
    ],
)
def test_what_sbatch_would_refuse_or_leave_pending_is_named(site, request_, message):
    site = SITE | site
    request = {"cpus": 2, "mem_mb": 1000, **job_resources(site, gpu=True), **request_}
    found = problems(site, {"train": request}, PARTITIONS)
    assert len(found) == 1 and message in found[0], found


def test_a_request_of_any_rule_is_checked_against_its_partition():
    request = {"cpus": 1, "mem_mb": 100000, "runtime": 60, "slurm_account": "proj1"}  # the default partition
    found = problems(SITE, {"prepare_sst2": request}, PARTITIONS)
    assert found == ["rule prepare_sst2 asks for mem_mb=100000 but partition 'cpu''s largest node has 65536"]


def job(rule, threads, local=False, **resources):
    return SimpleNamespace(rule=SimpleNamespace(name=rule), threads=threads, is_local=local, resources=resources)


def test_each_rule_asks_for_the_largest_request_of_its_submitted_jobs_and_localrules_ask_for_nothing():
    jobs = [
        job("pack", 4, mem_mb=32000, runtime=30, slurm_partition="gpu", gres="gpu:a100:1"),
        job("pack", 2, mem_mb=16000, runtime=90, slurm_partition="gpu", gres="gpu:a100:1"),
        job("prepare_sst2", 1, mem_mb="<TBD>", runtime=60),
        job("table1", 1, local=True, mem_mb=10**9),
    ]
    assert requests_of(jobs) == {
        "pack": {"cpus": 4, "mem_mb": 32000, "runtime": 90, "slurm_partition": "gpu", "gres": "gpu:a100:1"},
        "prepare_sst2": {"cpus": 1, "mem_mb": 0, "runtime": 60},
    }


@pytest.mark.parametrize(
    ("limit", "expected"),
    [("infinite", None), ("30:00", 30), ("2:00:00", 120), ("1-00:00:00", 1440), ("1-02:03:04", 1564), ("90", 90)],
)
def test_sinfo_time_limits_read_as_minutes(limit, expected):
    assert minutes(limit) == expected


def test_packs_hold_k_runs_in_order_and_the_last_the_rest():
    assert packs(list("abcde"), 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert packs([], 4) == []
