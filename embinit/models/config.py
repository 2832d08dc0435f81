"""The model's settings, one frozen dataclass for the translator and the classifier (SPEC section 3)."""

from __future__ import annotations

import dataclasses


OUTPUT_EMBEDDINGS = ("untied", "tied", "initialized")  # the translator's output projection (embinit.models.translator)
EMBEDDING_TRAINABLE = (True, False, "encoder", "decoder")  # both sides, neither, or only the named one
# how the non-embedding parameters start (embinit.models.layers.INITS): `recipe` as the PyTorch translation recipe
# initializes nn.Transformer (the paper's), `legacy` as this project's first model did (results made with it say so)
MODEL_INITS = ("recipe", "legacy")


def heads_by_dim(model_cfg: dict) -> dict[int, int]:
    return {int(k): v for k, v in (model_cfg.get("heads_by_dim") or {}).items()}


def heads_for(model_cfg: dict, dim: int) -> int:
    """`model.heads`, unless `model.heads_by_dim` names this D (the paper uses 10 heads for D = 300)."""
    return heads_by_dim(model_cfg).get(dim, model_cfg["heads"])


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    heads: int = 8
    ffn_dim: int = 512
    layers: int = 3  # per stack: the translator has this many encoder and decoder layers
    dropout: float = 0.1
    pos_encoding: str = "sinusoidal"  # a key of embinit.models.position.POSITION_ENCODINGS
    pos_base: float = 10000.0
    max_len: int = 256
    # True, False, or the one side whose input embedding trains ("encoder" / "decoder"; the translator's only)
    embedding_trainable: bool | str = True
    output_embedding: str = "untied"  # one of OUTPUT_EMBEDDINGS; the classifier takes only untied
    init: str = "recipe"  # one of MODEL_INITS
    final_norm: bool = True  # a LayerNorm after each stack, as nn.TransformerEncoder / Decoder put there

    def __post_init__(self):
        if self.embedding_trainable not in EMBEDDING_TRAINABLE:
            raise ValueError(
                f"embedding_trainable must be one of {EMBEDDING_TRAINABLE}, not {self.embedding_trainable!r}"
            )
        if self.output_embedding not in OUTPUT_EMBEDDINGS:
            raise ValueError(f"output_embedding must be one of {OUTPUT_EMBEDDINGS}, not {self.output_embedding!r}")
        if self.init not in MODEL_INITS:
            raise ValueError(f"model init must be one of {MODEL_INITS}, not {self.init!r}")

    def trains_embedding(self, side: str) -> bool:
        """Whether the input embedding of `side` ("encoder" / "decoder") trains: freezing one side only asks
        which side's frozen layer holds a frozen model back."""
        return self.embedding_trainable in (True, side)

    @classmethod
    def from_config(cls, model: dict, variant: dict, dim: int) -> ModelConfig:
        """From config `model` (a variant's `model` overrides already merged in) and one `variants` entry; D decides
        the heads (`model.heads_by_dim`)."""
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
            init=model["init"],
            final_norm=model["final_norm"],
        )
