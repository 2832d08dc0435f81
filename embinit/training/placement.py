"""Where a run runs: its device, CPU threads and CUDA determinism (config `train.device`, `train.num_threads`,
`train.deterministic`).

Kept free of torch, so the workflow can import it when it parses the Snakefile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


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

    @classmethod
    def from_config(cls, config: dict) -> Placement:
        train = config["train"]
        return cls(
            device=train["device"],
            num_threads=int(train["num_threads"]),
            deterministic=bool(train.get("deterministic", False)),
        )
