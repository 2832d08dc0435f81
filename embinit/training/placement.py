"""Where a run runs: its device and CPU threads (config `train.device`, `train.num_threads`).

Kept free of torch, so the workflow can import it when it parses the Snakefile.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """The device ("auto": CUDA when available, else the CPU; or a torch device name such as "cpu", "cuda:1")
    and the torch CPU threads (0: the job's threads).

    Neither is part of what a run is. The train rule passes them as this object rather than as plain values
    because Snakemake leaves objects out of the params that trigger reruns (as embinit.data.fetch.FetchSettings):
    moving runs to a GPU or giving them more threads retrains nothing.
    """

    device: str = "auto"
    num_threads: int = 0

    @classmethod
    def from_config(cls, config: dict) -> Placement:
        return cls(device=config["train"]["device"], num_threads=int(config["train"]["num_threads"]))
