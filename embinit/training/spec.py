"""A run's spec, typed: the settings the workflow plans for a run (embinit.workflow.specs.train_spec), whose digest its record
keeps, and apart from them the files its job hands it, so that where the files lie is no part of what a run is."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from embinit.identity.digests import spec_digest

OPTIONAL = ("speed_options", "batching_code")  # absent from a spec's identity when unset: earlier digests hold


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What makes a run the run it is. `identity()` is what its record's `spec_digest` hashes and what the train rule
    hands its job (plain values, which Snakemake's params trigger compares); the fields keep that dict's order."""

    kind: str  # "translation" | "classification"
    model: dict  # config `model`, with the variant's overrides
    train: dict  # config `train`, with the variant's overrides, less the placement's keys and the speed options
    variant: dict  # pos_encoding, embedding_trainable and the variant's other switches
    epochs: int
    batch_size: int
    lr: float
    seed: int
    valid_bleu: bool = True  # translation: greedy validation BLEU every epoch (validation loss always)
    num_classes: int | None = None  # classification
    tokenizer: str | None = None
    languages: list | None = None
    position_code: str | None = None  # the position encoding's code_fingerprint (built in or an extension)
    run: dict  # block, task, initializer, seed, variant (and a named setting's initializer_entry and _params)
    speed_options: dict | None = None  # {"compile": True} / {"packed": True}: last bits of floats only
    batching_code: str | None = None  # an extension's batching's code (a built-in one's is the training code)

    @classmethod
    def of(cls, identity: dict) -> RunSpec:
        return cls(**identity)

    def identity(self) -> dict:
        spec = dataclasses.asdict(self)
        return {k: v for k, v in spec.items() if not (k in OPTIONAL and v is None)}

    @property
    def digest(self) -> str:
        return spec_digest(self.identity())

    @property
    def name(self) -> str:
        return f"{self.run['block']}/{self.run['initializer']}/seed{self.run['seed']}/{self.run['variant']}"

    @property
    def translation(self) -> bool:
        return self.kind == "translation"

    def speed(self, option: str) -> bool:
        """Whether a speed option (embinit.workflow.specs.SPEED_OPTIONS) is on."""
        return bool((self.speed_options or {}).get(option, False))


@dataclass(frozen=True)
class RunFiles:
    """Where a run's inputs lie: the tokenized splits (None: a task without that split), the layers it starts from
    and, for BLEU, the decoder side's detokenizer and the references. Their content is part of the run's identity
    (embinit.training.checkpoint.identity_of), their paths are not."""

    data: dict[str, str | None]
    embeddings: dict[str, str | None]
    detokenizer: str | None = None
    references: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def of(cls, inputs) -> RunFiles:
        """From the train rule's named inputs (embinit.workflow.plan.Plan.run_inputs)."""
        return cls(
            data={split: inputs.get(split) for split in ("train", "valid", "test")},
            embeddings={side: inputs.get(f"emb_{side}") for side in ("encoder", "decoder")},
            detokenizer=inputs.get("detokenizer"),
            references={split: inputs.get(f"references_{split}") for split in ("valid", "test")},
        )

    def by_role(self) -> dict[str, str]:
        """Every file given, by role: data.<split>, embeddings.<side>, references.<split>, detokenizer."""
        groups = {"data": self.data, "embeddings": self.embeddings, "references": self.references}
        files = {f"{group}.{role}": path for group, paths in groups.items() for role, path in paths.items() if path}
        return files | ({"detokenizer": self.detokenizer} if self.detokenizer else {})
