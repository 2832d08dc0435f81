"""A padded batch's real tokens as one packed (n, W) matrix, for the position-wise layers (`train.packed`).

Right-padded (B, T) ids: their n real tokens in row order. Linear layers, LayerNorms, the feed-forward block, residual
additions and dropout on token states work on the packed rows alone; attention pads them back to (B, T, W), runs as
on a padded batch, and packs its output again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from embinit.data.vocab import PAD


@dataclass(frozen=True)
class Packing:
    index: torch.Tensor  # (n,) flat indices of the real tokens in (B * T)
    shape: tuple[int, int]  # (B, T)

    @classmethod
    def of(cls, ids: torch.Tensor) -> Packing:
        return cls((ids != PAD).flatten().nonzero()[:, 0], (ids.size(0), ids.size(1)))

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (n, ...): the real tokens' rows."""
        return x.flatten(0, 1).index_select(0, self.index)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(n, W) -> (B, T, W), zeros at the pad positions."""
        out = x.new_zeros(self.shape[0] * self.shape[1], x.size(-1))
        return out.index_copy(0, self.index, x).view(*self.shape, x.size(-1))
