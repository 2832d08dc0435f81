"""A Placement made real in torch: the device, the CPU threads, bf16 autocast, and the device's description."""

from __future__ import annotations

import contextlib

import torch

from embinit.training.placement import Placement


def pick_device(setting: str = "auto") -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def place(placement: Placement, job_threads: int = 0) -> torch.device:
    """Set torch's CPU threads (the placement's, else the job's, else torch's default) and return the device."""
    threads = placement.num_threads or job_threads
    if threads > 0:
        torch.set_num_threads(threads)
    return pick_device(placement.device)


def autocast(device: torch.device, bf16: bool):
    """bf16 autocast when asked. Runs ask for it only on CUDA (`train.bf16`); the tests also use it on the CPU,
    so the mixed-precision path is exercised without a GPU."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def describe(device: torch.device) -> str:
    """final.json's `device`: the GPU's name, or the CPU's thread count."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
