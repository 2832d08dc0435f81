"""A Placement made real in torch: the device (a GPU slot on a machine with several), the CPU threads, CUDA
determinism, bf16 autocast, how a step runs on the device (StepPolicy), and the device's description."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from embinit.training.placement import Placement, require_cuda

# one lock file per running job and GPU, held while it trains: the kernel drops it when the job ends or is killed
SLOT_DIR = Path(tempfile.gettempdir()) / f"embinit-gpu-slots-{os.getuid()}"


@contextlib.contextmanager
def place(placement: Placement) -> Iterator[torch.device]:
    """Set torch's CPU threads (the placement's, else torch's default) and CUDA determinism, and yield the device,
    holding its GPU slot while the block runs."""
    if placement.num_threads > 0:
        torch.set_num_threads(placement.num_threads)
    if placement.deterministic:
        make_deterministic()
    with contextlib.ExitStack() as stack:
        device = pick_device(placement.device, stack)
        if device.type == "cuda" and device.index is not None:
            torch.cuda.set_device(device)  # stray allocations and synchronize() go to the run's GPU, not to GPU 0
        yield device


def make_deterministic() -> None:
    """Deterministic kernels only (an op without one fails naming itself): CUDA reruns and resumes become
    bit-exact on one GPU model and driver; on the CPU it changes compiled steps only (`train.compile`: inductor then
    leaves the embedding gradient's scatter-add to torch's kernel instead of atomic adds from parallel threads)."""
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # read when cuBLAS starts: before any CUDA work
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def pick_device(setting: str, stack: contextlib.ExitStack) -> torch.device:
    """The device `train.device` names; "auto": the least busy visible GPU (its slot held on `stack`), else the
    CPU. A GPU asked for (by the setting, or by a scheduler's CUDA_VISIBLE_DEVICES) that torch cannot use is
    an error, not a silent fall back to the CPU."""
    if setting == "auto" and not scheduler_assigned_gpu() and not torch.cuda.is_available():
        return torch.device("cpu")
    device = torch.device("cuda" if setting == "auto" else setting)
    if device.type != "cuda":
        return device
    require_cuda(setting, device)
    if setting == "auto":
        device = torch.device("cuda", hold_least_busy_gpu(torch.cuda.device_count(), stack))
    return device


def scheduler_assigned_gpu() -> bool:
    """Whether CUDA_VISIBLE_DEVICES lists a device (SLURM's "NoDevFiles" and "-1" list none)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return bool(visible) and visible != "NoDevFiles" and not visible.startswith("-")


def hold_least_busy_gpu(count: int, stack: contextlib.ExitStack) -> int:
    """The index of the visible GPU the fewest running jobs hold (the lowest on ties), with a slot on it held
    until `stack` closes. Jobs of every snakemake process of this user on this machine count."""
    if count == 1:
        return 0
    visible = [name.strip().replace("/", "_") for name in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    physical = [visible[i] if i < len(visible) and visible[i] else str(i) for i in range(count)]  # MIG names hold "/"
    SLOT_DIR.mkdir(parents=True, exist_ok=True)
    with open(SLOT_DIR / "pick.lock", "a") as pick:
        fcntl.flock(pick, fcntl.LOCK_EX)  # one job picks at a time
        busy = [sum(is_held(path) for path in SLOT_DIR.glob(f"gpu-{gpu}.*.lock")) for gpu in physical]
        index = busy.index(min(busy))
        slot = next(s for s in itertools.count() if not is_held(SLOT_DIR / f"gpu-{physical[index]}.{s}.lock"))
        lock = stack.enter_context(open(SLOT_DIR / f"gpu-{physical[index]}.{slot}.lock", "a"))
        fcntl.flock(lock, fcntl.LOCK_EX)
    return index


def is_held(path: Path) -> bool:
    """Whether a running job holds the lock file `path`."""
    with open(path, "a") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False


def autocast(device: torch.device, bf16: bool):
    """bf16 autocast when asked. Runs ask for it only on CUDA (`train.bf16`); the tests also use it on the CPU,
    so the mixed-precision path is exercised without a GPU."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


@dataclass(frozen=True)
class StepPolicy:
    """How training and evaluation steps run on a device. The CPU pays for memory traffic, so its loss is the chunked
    fused one over the real tokens; a GPU pays for kernel launches and for every wait on the device (a value read
    back, a copy from pageable memory), which this small model's step is bound by, so there the loss is one library
    call and nothing is read back inside a step (docs/performance.md, "The GPU step path")."""

    fused_loss: bool  # Translator.loss: the chunked fused loss over real tokens (True) or one F.cross_entropy
    pinned_copies: bool  # host batches pinned and copied to the device without waiting (non_blocking)
    done_check_every: int  # greedy decoding asks whether every sentence has finished every this many steps

    def to_device(self, batch: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
        """A host batch's tensors on `device`."""
        if self.pinned_copies:
            return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)
        return tuple(t.to(device) for t in batch)


CPU_STEPS = StepPolicy(fused_loss=True, pinned_copies=False, done_check_every=1)
CUDA_STEPS = StepPolicy(fused_loss=False, pinned_copies=True, done_check_every=8)


def step_policy(device: torch.device, compiled: bool = False) -> StepPolicy:
    """The one place a step's path is chosen: by its device, and for compiled steps (`train.compile`) the library loss
    on every device: inductor fuses it, where the fused loss's count of real tokens is a new shape every step, each a
    recompile (docs/performance.md, "Compiled steps")."""
    policy = CUDA_STEPS if device.type == "cuda" else CPU_STEPS
    return replace(policy, fused_loss=False) if compiled else policy


def describe(device: torch.device) -> str:
    """final.json's `device`: the GPU's name, or the CPU's thread count."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
