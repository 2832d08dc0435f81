"""Where a run runs: its device, CPU threads and CUDA determinism (config `train.device`, `train.num_threads`,
`train.deterministic`).

Kept free of torch, so the workflow can import it when it parses the Snakefile (`require_cuda` imports torch when
called).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Placement:
    """The device ("auto": the least busy visible GPU when torch has CUDA, else the CPU; or a torch device name
    such as "cpu", "cuda:1"), the torch CPU threads (0: the job's threads) and whether CUDA runs deterministic
    kernels only (bit-exact reruns and resumes on one GPU model, at a cost in speed: docs/reliability.md).

    None is part of what a run is. The train rule passes them as this object rather than as plain values
    because Snakemake leaves objects out of the params that trigger reruns (as embinit.data.fetch.FetchSettings):
    moving runs to a GPU, giving them more threads or deterministic kernels retrains nothing.
    """

    device: str = "auto"
    num_threads: int = 0
    deterministic: bool = False

    CONFIG_KEYS: ClassVar[tuple[str, ...]] = (
        "device",
        "num_threads",
        "deterministic",
    )  # the `train` keys read here, no part of a run's spec

    def with_job_threads(self, threads: int) -> Placement:
        """The job's threads where the config sets none (`num_threads: 0`)."""
        return dataclasses.replace(self, num_threads=self.num_threads or threads)

    @classmethod
    def from_config(cls, config: dict) -> Placement:
        train = config["train"]
        return cls(
            device=train["device"],
            num_threads=int(train["num_threads"]),
            deterministic=bool(train.get("deterministic", False)),
        )


def require_cuda(setting: str, device: torch.device) -> None:
    """Fail at the job's start, in one line naming `train.device`, when torch cannot run on `device` (also the
    workflow's check of a local run's device, embinit.workflow.checks.check_local_device)."""
    import torch

    asked = f"train.device: {setting}"
    if setting == "auto":
        asked += f" with CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} (a GPU given to this job)"
    if not torch.cuda.is_available():
        try:
            torch.cuda.init()
            reason = f"torch {torch.__version__} sees no CUDA device"
        except Exception as error:  # torch's own words: not compiled with CUDA, no driver, driver too old, ...
            reason = f"torch {torch.__version__}: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        raise RuntimeError(f"{asked}, but torch cannot use CUDA ({reason}); set train.device: cpu to train on the CPU")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise RuntimeError(f"{asked}, but torch sees {count} CUDA device(s) (cuda:0 to cuda:{count - 1})")
