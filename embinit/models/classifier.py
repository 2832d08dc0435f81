"""Encoder-only transformer for sentence(-pair) classification (SPEC section 3).

The translator's encoder stack; the sentence representation is the mean of the encoder outputs over
non-pad positions (the paper says only "pooled"), followed by one Linear(D, num_classes).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from embinit.models.translator import EncoderLayer, TokenInput, encoder_layer_parameters, key_padding, xavier_init


class Classifier(nn.Module):
    def __init__(self, embedding: np.ndarray, num_classes: int, *, heads: int, ffn_dim: int = 512,
                 layers: int = 3, dropout: float = 0.1, pos_encoding: str = "sinusoidal",
                 pos_base: float = 10000, max_len: int = 256, embedding_trainable: bool = True):
        super().__init__()
        dim = embedding.shape[1]
        self.max_len = max_len
        self.input = TokenInput(embedding, embedding_trainable, pos_encoding, max_len, pos_base, dropout)
        self.encoder = nn.ModuleList(EncoderLayer(dim, heads, ffn_dim, dropout) for _ in range(layers))
        self.head = nn.Linear(dim, num_classes)
        xavier_init(self)

    def encode(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = key_padding(ids)
        x = self.input(ids)
        for layer in self.encoder:
            x = layer(x, keep)
        return x, keep

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Class logits (B, num_classes)."""
        x, keep = self.encode(ids)
        real = keep[:, 0, 0, :, None].to(x.dtype)  # (B, S, 1)
        pooled = (x * real).sum(1) / real.sum(1)
        return self.head(pooled)

    def loss(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Summed cross-entropy of the class logits (in fp32, also under autocast)."""
        return F.cross_entropy(self(ids).float(), labels, reduction="sum")

    def num_parameters(self) -> int:
        """All parameters, frozen embedding included (the count the paper's Table 5 reports)."""
        return sum(p.numel() for p in self.parameters())


def expected_parameters(n_vocab: int, dim: int, num_classes: int, ffn_dim: int = 512, layers: int = 3,
                        pos_encoding: str = "sinusoidal", max_len: int = 256) -> int:
    """Closed form of Classifier.num_parameters()."""
    positions = max_len * dim if pos_encoding == "learned" else 0
    encoder = layers * encoder_layer_parameters(dim, ffn_dim)
    return n_vocab * dim + positions + encoder + dim * num_classes + num_classes
