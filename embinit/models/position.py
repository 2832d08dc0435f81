"""Position encodings added to the scaled token embedding, as a registry of small modules.

Each is `cls(dim, config)` with `forward(x, start)`: x (B, T, D) at positions start .. start + T - 1 -> x with
the encoding added. Adding one = one `@register` class here + its name as a `variants.<v>.pos_encoding` value.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from embinit.layers.position_table import sinusoidal_table

POSITION_ENCODINGS: dict[str, type[nn.Module]] = {}


def register(name: str):
    def add(cls: type[nn.Module]) -> type[nn.Module]:
        POSITION_ENCODINGS[name] = cls
        return cls

    return add


@register("sinusoidal")
class Sinusoidal(nn.Module):
    """Vaswani et al.'s fixed table (sin on even, cos on odd dimensions); a buffer, not a parameter."""

    def __init__(self, dim: int, config):
        super().__init__()
        self.register_buffer(
            "table", torch.from_numpy(sinusoidal_table(config.max_len, dim, config.pos_base)), persistent=False
        )

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + self.table[start : start + x.size(1)]


@register("learned")
class Learned(nn.Module):
    """A trained table of max_len rows, Xavier-initialized."""

    def __init__(self, dim: int, config):
        super().__init__()
        self.table = nn.Embedding(config.max_len, dim)
        nn.init.xavier_uniform_(self.table.weight)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + self.table.weight[start : start + x.size(1)]


@register("none")
class NoPosition(nn.Module):
    """No position information: the encoder is then permutation-equivariant."""

    def __init__(self, dim: int, config):
        super().__init__()

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x
