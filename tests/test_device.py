"""Where a run runs, without a GPU: CUDA faked through torch.cuda's functions (docs/reliability.md, Devices)."""

import contextlib
import logging
import os
import subprocess
import sys

import pytest
import torch
from torch.cuda._utils import _get_device_index

from embinit.workflow.checks import check_local_device
from embinit.workflow.config import ConfigError
from embinit.training import Placement, checkpoint, device


@pytest.fixture
def fake_gpus(monkeypatch, tmp_path):
    """A torch that sees `count` GPUs (set it on the returned object); the GPUs' slot locks under tmp_path."""

    class Gpus:
        count = 2
        current = []

    gpus = Gpus()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus.count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus.count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: gpus.current.append(_get_device_index(d)))
    monkeypatch.setattr(device, "SLOT_DIR", tmp_path / "slots")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return gpus


def picked(stack, setting="auto"):
    return device.pick_device(setting, stack)


def test_auto_spreads_jobs_over_the_visible_gpus_least_busy_first(fake_gpus):
    with contextlib.ExitStack() as first, contextlib.ExitStack() as second, contextlib.ExitStack() as third:
        assert [picked(first), picked(second), picked(third)] == [torch.device(f"cuda:{i}") for i in (0, 1, 0)]
        second.close()  # the job on cuda:1 ended
        with contextlib.ExitStack() as fourth:
            assert picked(fourth) == torch.device("cuda:1")
    with contextlib.ExitStack() as alone:
        assert picked(alone) == torch.device("cuda:0")  # every slot free again
    assert picked(contextlib.ExitStack(), "cuda:1") == torch.device("cuda:1")  # a named device is taken as named


def test_a_killed_job_frees_its_gpu_and_other_processes_count(fake_gpus):
    """A slot is an flock: another snakemake process's job counts, and a kill -9 releases it."""
    fake_gpus.count = 3
    device.SLOT_DIR.mkdir(parents=True)
    holder = (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print(1, flush=True); time.sleep(60)"
    )
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", holder, str(device.SLOT_DIR / f"gpu-{gpu}.0.lock")], stdout=subprocess.PIPE
        )
        for gpu in (0, 1)
    ]
    try:
        for job in jobs:
            assert job.stdout.readline() == b"1\n"
        with contextlib.ExitStack() as stack:
            assert picked(stack) == torch.device("cuda:2")
        jobs[0].kill()
        jobs[0].wait()
        with contextlib.ExitStack() as stack:
            assert picked(stack) == torch.device("cuda:0")
    finally:
        for job in jobs:
            job.kill()
            job.wait()


def test_slots_are_named_by_the_physical_gpu(fake_gpus, monkeypatch):
    """Two snakemake processes given other CUDA_VISIBLE_DEVICES lists count the same physical GPUs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, MIG-GPU-5a/1/0")
    with contextlib.ExitStack() as first, contextlib.ExitStack() as second:
        picked(first), picked(second)
        assert sorted(p.name for p in device.SLOT_DIR.glob("gpu-*")) == ["gpu-3.0.lock", "gpu-MIG-GPU-5a_1_0.0.lock"]


def test_one_visible_gpu_takes_no_lock(fake_gpus):
    """A SLURM job sees only its own GPU: nothing to balance, and no lock file on a shared file system."""
    fake_gpus.count = 1
    with contextlib.ExitStack() as stack:
        assert picked(stack) == torch.device("cuda:0")
    assert not device.SLOT_DIR.exists()


def test_place_sets_the_run_s_gpu_as_torch_s_current_device(fake_gpus):
    with device.place(Placement("auto")) as first, device.place(Placement("auto")) as second:
        assert (first, second) == (torch.device("cuda:0"), torch.device("cuda:1"))
    assert fake_gpus.current == [0, 1]
    with device.place(Placement("cuda")) as current:  # torch's current device, whichever it is
        assert current == torch.device("cuda") and fake_gpus.current == [0, 1]


@pytest.mark.parametrize("visible", ["", "NoDevFiles", "-1"])
def test_auto_without_a_gpu_given_runs_on_the_cpu(monkeypatch, visible):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert picked(contextlib.ExitStack()) == torch.device("cpu")


def no_cuda(monkeypatch, reason):
    """A torch that cannot use CUDA, saying `reason` the way torch.cuda.init does."""

    def init():
        raise AssertionError(reason)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "init", init)


def test_cuda_asked_for_on_a_machine_without_fails_naming_train_device(monkeypatch):
    no_cuda(monkeypatch, "Torch not compiled with CUDA enabled")
    with pytest.raises(RuntimeError) as error:
        picked(contextlib.ExitStack(), "cuda")
    assert str(error.value) == (
        f"train.device: cuda, but torch cannot use CUDA (torch {torch.__version__}: Torch not compiled with CUDA "
        "enabled); set train.device: cpu to train on the CPU"
    )


def test_a_scheduler_s_gpu_that_torch_cannot_use_fails_instead_of_training_on_the_cpu(monkeypatch):
    no_cuda(monkeypatch, "Found no NVIDIA driver on your system.\nPlease check ...")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with (
        pytest.raises(
            RuntimeError,
            match=r"^train.device: auto with CUDA_VISIBLE_DEVICES=0 \(a GPU given to this job\), "
            r"but torch cannot use CUDA \(torch .*: Found no NVIDIA driver on your system.\); set train.device: cpu",
        ),
        device.place(Placement("auto")),
    ):
        pass


def test_the_real_torch_here_names_itself(monkeypatch):
    """This machine's torch is a CPU build (no test needs a GPU): its own words reach the message."""
    if torch.cuda.is_available():
        pytest.skip("this torch can use a GPU, so it gives no reason to refuse one")
    with pytest.raises(RuntimeError, match=r"^train.device: cuda:0, but torch cannot use CUDA \(torch "):
        picked(contextlib.ExitStack(), "cuda:0")


def test_a_gpu_index_beyond_the_visible_ones_fails_naming_train_device(fake_gpus):
    with pytest.raises(
        RuntimeError, match=r"^train.device: cuda:2, but torch sees 2 CUDA device\(s\) \(cuda:0 to cuda:1\)"
    ):
        picked(contextlib.ExitStack(), "cuda:2")


def test_deterministic_sets_cublas_workspace_and_deterministic_kernels(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    try:
        with device.place(Placement("cpu", deterministic=True)) as placed:
            assert placed == torch.device("cpu")
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
            assert torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.benchmark
    finally:
        torch.use_deterministic_algorithms(False)


def test_placement_reads_its_config_keys_and_defaults_to_nondeterministic():
    train = {"device": "cuda:1", "num_threads": 3, "deterministic": True}
    assert Placement.from_config({"train": train}) == Placement("cuda:1", 3, True)
    assert Placement.from_config({"train": {"device": "auto", "num_threads": 0}}).deterministic is False
    assert set(Placement.CONFIG_KEYS) == set(train)


def saved_state(gpus, ran_on=None):
    """An RNG state as a node with `gpus` visible GPUs saved it (the run on cuda:`ran_on`, or the CPU)."""
    state = checkpoint.rng_state(torch.device("cpu"))
    return dict(state, cuda=[torch.full((16,), i, dtype=torch.uint8) for i in range(gpus)], cuda_device=ran_on)


@pytest.fixture
def restored(monkeypatch):
    """The (device index, first byte of the state) of every CUDA RNG state set."""
    calls = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, index: calls.append((index, int(state[0]))))
    return calls


@pytest.mark.parametrize("present", [0, 1, 2])
def test_rng_states_of_two_gpus_restore_on_the_gpus_present(monkeypatch, restored, caplog, present):
    torch.manual_seed(0)
    state = saved_state(2)
    torch.rand(3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: present > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: present)
    with caplog.at_level(logging.WARNING, "embinit.training.checkpoint"):
        checkpoint.set_rng_state(state, torch.device("cpu"))
    assert restored == [(i, i) for i in range(present)]
    assert torch.equal(torch.get_rng_state(), state["torch"])
    warnings = [r.getMessage() for r in caplog.records]
    if present == 2:
        assert warnings == []
    else:
        left_out = "cuda:1 to cuda:1" if present == 1 else "cuda:0 to cuda:1"
        restored_text = "cuda:0 to cuda:0" if present == 1 else "none"
        assert warnings == [
            f"the checkpoint holds the RNG states of 2 CUDA devices, {present} are visible: "
            f"restored {restored_text}, left out {left_out}"
        ]


def test_the_run_s_gpu_stream_follows_it_to_another_slot(monkeypatch, restored):
    """Saved while running on cuda:1, resumed on cuda:0: cuda:0 gets the stream the run was drawing from."""
    state = saved_state(2, ran_on=1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    checkpoint.set_rng_state(state, torch.device("cuda:0"))
    assert restored[-1] == (torch.device("cuda:0"), 1)


def test_cuda_named_in_the_config_fails_before_any_job(monkeypatch):
    """Issue 58: the Snakefile checks train.device while it parses (a local run), so `train.device: cuda` on a
    machine without one fails at once naming the key, not at the first train job after the data jobs."""
    no_cuda(monkeypatch, "Torch not compiled with CUDA enabled")
    with pytest.raises(ConfigError, match=r"^config key train.device: cuda:0, but torch cannot use CUDA \(torch .*"):
        check_local_device({"train": {"device": "cuda:0"}})
    for setting in ("auto", "cpu"):
        check_local_device({"train": {"device": setting}})  # auto falls back to the CPU where no GPU was given
