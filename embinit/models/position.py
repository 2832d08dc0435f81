"""Position encodings, as a registry of small modules: each stack (encoder; decoder) builds one.

An encoding is a `PositionEncoding` subclass, built as `cls(dim, config, causal)` (causal: the decoder's stack,
whose self-attention looks only back), that overrides any of three hooks:
- `embed(x, start)`: absolute encodings add to the scaled token embedding here (sinusoidal, learned);
- `rotate(t, start)`: the stack's self-attention queries and keys, before their dot products (rotary);
- `bias(q_start, q_len, k_len)`: added to the stack's self-attention scores (relative).
Cross-attention (decoder to encoder memory) uses none of them. Adding one = one `@register` class here + its
name as a `variants.<v>.pos_encoding` value.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from embinit.layers.position_table import sinusoidal_table
from embinit.registry import POSITION_ENCODINGS


class PositionEncoding(nn.Module):
    """The hooks a position encoding can use; each default leaves its input alone."""

    def __init__(self, dim: int, config, causal: bool = False):
        super().__init__()

    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x (B, T, D), the scaled token embeddings at positions start .. start + T - 1 -> (B, T, D)."""
        return x

    def rotate(self, t: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Queries or keys (B, heads, T, D / heads) at positions start .. start + T - 1 -> the same shape."""
        return t

    def bias(self, q_start: int, q_len: int, k_len: int) -> torch.Tensor | None:
        """What to add to the scores of queries at q_start .. q_start + q_len - 1 against keys at 0 .. k_len - 1
        (self-attention's keys are always the whole prefix): (heads, q_len, k_len), or None for nothing."""
        return None


# Verbatim: its text enters every position encoding's fingerprint (embinit.identity.fingerprints): an edit reruns every run.
def register(name: str):
    def add(cls: type[PositionEncoding]) -> type[PositionEncoding]:
        POSITION_ENCODINGS[name] = cls
        return cls

    return add


@register("sinusoidal")
class Sinusoidal(PositionEncoding):
    """Vaswani et al.'s fixed table (sin on even, cos on odd dimensions); a buffer, not a parameter."""

    def __init__(self, dim: int, config, causal: bool = False):
        super().__init__(dim, config, causal)
        self.register_buffer(
            "table", torch.from_numpy(sinusoidal_table(config.max_len, dim, config.pos_base)), persistent=False
        )

    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + self.table[start : start + x.size(1)]


@register("learned")
class Learned(PositionEncoding):
    """A trained table of max_len rows, Xavier-initialized."""

    def __init__(self, dim: int, config, causal: bool = False):
        super().__init__(dim, config, causal)
        self.table = nn.Embedding(config.max_len, dim)
        nn.init.xavier_uniform_(self.table.weight)

    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + self.table.weight[start : start + x.size(1)]


@register("none")
class NoPosition(PositionEncoding):
    """No position information: the encoder is then permutation-equivariant."""


@register("rotary")
class Rotary(PositionEncoding):
    """RoPE (Su et al. 2021): self-attention queries and keys turned by their absolute position, so that their
    dot products depend on the relative position only. Dimension pairs (2i, 2i + 1) of each head turn by
    pos * base^(-2i / d_rot) with base `pos_base`; d_rot is the largest even number <= the head width, so an odd
    head (D = 50 with 10 heads: width 5) leaves its last dimension unrotated. Nothing is added to the embedding;
    no parameters."""

    def __init__(self, dim: int, config, causal: bool = False):
        super().__init__(dim, config, causal)
        width = dim // config.heads
        self.rotated = width - width % 2  # d_rot
        rates = config.pos_base ** (-torch.arange(0, self.rotated, 2, dtype=torch.float64) / self.rotated)
        angles = torch.arange(config.max_len, dtype=torch.float64)[:, None] * rates  # (max_len, d_rot / 2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def rotate(self, t: torch.Tensor, start: int = 0) -> torch.Tensor:
        cos = self.cos[start : start + t.size(2)].to(t.dtype)  # (T, d_rot / 2)
        sin = self.sin[start : start + t.size(2)].to(t.dtype)
        even, odd = t[..., 0 : self.rotated : 2], t[..., 1 : self.rotated : 2]  # (B, heads, T, d_rot / 2) each
        turned = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
        return torch.cat((turned, t[..., self.rotated :]), dim=-1)


@register("relative")
class RelativeBias(PositionEncoding):
    """T5's bucketed relative position bias (Raffel et al. 2020): a learned scalar per (bucket, head) added to the
    self-attention scores, one table per stack shared by its layers, as in T5.

    The distance key - query falls into one of `buckets` buckets: the encoder's split them between the two
    directions, the decoder's (causal) all look back. Half of a direction's buckets are exact distances, the
    rest log-spaced up to `max_distance`; farther keys share the last bucket. The table starts at zero: no
    position information, the `none` model weight for weight, so that whatever the variant gains is learned
    (T5 itself draws the table at random). Nothing is added to the embedding.
    """

    buckets = 32
    max_distance = 128

    def __init__(self, dim: int, config, causal: bool = False):
        super().__init__(dim, config, causal)
        self.causal = causal
        self.table = nn.Parameter(torch.zeros(self.buckets, config.heads))  # draws no random numbers

    def bucket(self, distance: torch.Tensor) -> torch.Tensor:
        """Key position - query position (any shape, int64) -> bucket index, T5's `_relative_position_bucket`."""
        buckets, first = self.buckets, torch.zeros_like(distance)
        if self.causal:
            distance = (-distance).clamp(min=0)  # later keys (masked anyway) share distance 0's bucket
        else:
            buckets //= 2
            first = (distance > 0).long() * buckets  # keys after the query use the upper half
            distance = distance.abs()
        exact = buckets // 2
        log_ratio = torch.log(distance.float().clamp(min=1) / exact) / math.log(self.max_distance / exact)
        far = exact + (log_ratio * (buckets - exact)).long()  # T5's order of operations: the same floors
        return first + torch.where(distance < exact, distance, far.clamp(max=buckets - 1))

    def bias(self, q_start: int, q_len: int, k_len: int) -> torch.Tensor:
        queries = torch.arange(q_start, q_start + q_len, device=self.table.device)
        keys = torch.arange(k_len, device=self.table.device)
        return self.table[self.bucket(keys[None, :] - queries[:, None])].permute(2, 0, 1)  # (heads, T, S)
