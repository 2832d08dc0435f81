"""The model's settings, one frozen dataclass for the translator and the classifier (SPEC section 3)."""

from __future__ import annotations

import dataclasses

from embinit.config import heads_for

OUTPUT_EMBEDDINGS = ("untied", "tied", "initialized")  # the translator's output projection (embinit.models.translator)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    heads: int = 8
    ffn_dim: int = 512
    layers: int = 3  # per stack: the translator has this many encoder and decoder layers
    dropout: float = 0.1
    pos_encoding: str = "sinusoidal"  # a key of embinit.models.position.POSITION_ENCODINGS
    pos_base: float = 10000.0
    max_len: int = 256
    embedding_trainable: bool = True
    output_embedding: str = "untied"  # one of OUTPUT_EMBEDDINGS; the classifier takes only untied

    def __post_init__(self):
        if self.output_embedding not in OUTPUT_EMBEDDINGS:
            raise ValueError(f"output_embedding must be one of {OUTPUT_EMBEDDINGS}, not {self.output_embedding!r}")

    @classmethod
    def from_config(cls, model: dict, variant: dict, dim: int) -> ModelConfig:
        """From config `model` and one `variants` entry; D decides the heads (`model.heads_by_dim`)."""
        return cls(
            heads=heads_for(model, dim),
            ffn_dim=model["ffn_dim"],
            layers=model["layers"],
            dropout=model["dropout"],
            pos_encoding=variant["pos_encoding"],
            pos_base=model["pos_base"],
            max_len=model["max_len"],
            embedding_trainable=variant["embedding_trainable"],
            output_embedding=variant.get("output_embedding", "untied"),
        )
