"""Encoder-only transformer for sentence(-pair) classification (SPEC section 3).

The translator's encoder; the sentence representation is the mean of the encoder outputs over non-pad
positions (the paper says only "pooled"), followed by one Linear(D, num_classes).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from embinit.models.config import ModelConfig
from embinit.models.layers import INITS, Encoder


class Classifier(nn.Module):
    def __init__(self, embedding: np.ndarray, num_classes: int, config: ModelConfig):
        super().__init__()
        if config.output_embedding != "untied":
            raise ValueError(
                f"output_embedding {config.output_embedding!r} couples a translator's output projection to its "
                "decoder embedding; the classifier's output, Linear(D, classes), has none: use 'untied'"
            )
        if config.embedding_trainable == "decoder":
            raise ValueError(
                "embedding_trainable 'decoder' trains a translator's decoder embedding; the classifier has none"
            )
        self.encoder = Encoder(embedding, config)
        self.output = nn.Linear(embedding.shape[1], num_classes)
        INITS[config.init](self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, S) ids -> class logits (B, num_classes)."""
        x, keep = self.encoder(ids)  # (B, S, D), (B, 1, 1, S)
        real = keep[:, 0, 0, :, None].to(x.dtype)  # (B, S, 1)
        pooled = (x * real).sum(1) / real.sum(1)  # (B, D)
        return self.output(pooled)

    @staticmethod
    def loss_terms(labels: torch.Tensor) -> int:
        """How many terms `loss` sums: one per example."""
        return len(labels)

    def loss(self, ids: torch.Tensor, labels: torch.Tensor, fused: bool = True) -> torch.Tensor:
        """Summed cross-entropy of the class logits (in fp32, also under autocast). One path on every device:
        `fused` picks the translator's output loss (embinit.models.loss), and Linear(D, classes) has nothing to fuse."""
        return F.cross_entropy(self(ids).float(), labels, reduction="sum")

    def num_parameters(self) -> int:
        """All parameters, frozen embedding included (the count the paper's Table 5 reports)."""
        return sum(p.numel() for p in self.parameters())
