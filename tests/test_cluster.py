"""SLURM site settings (config `cluster`) as job resources, checked against partitions as sinfo reports them."""

import pytest

from embinit.cluster import job_resources, problems

SITE = {"account": "proj1", "gpu_partition": "gpu", "gpu_model": "a100"}
PARTITIONS = {
    "cpu": {"cpus": 16, "mem_mb": 65536, "gres": set(), "default": True},
    "gpu": {"cpus": 32, "mem_mb": 256000, "gres": {"gpu:a100:4", "shard:32"}, "default": False},
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
    ],
)
def test_what_sbatch_would_refuse_or_leave_pending_is_named(site, request_, message):
    site = SITE | site
    request = {"cpus": 2, "mem_mb": 1000, **job_resources(site, gpu=True), **request_}
    found = problems(site, {"train": request}, PARTITIONS)
    assert len(found) == 1 and message in found[0], found
