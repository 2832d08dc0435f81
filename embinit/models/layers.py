"""The transformer's building blocks (Vaswani et al. 2017, SPEC section 3), shared by both models.

Post-LN layers, ReLU feed-forward of width `ffn_dim`, dropout; attention through
F.scaled_dot_product_attention except where the cheap CPU dropout mask or a `weights_sink` needs the weights.
Each stack's position encoding (embinit.models.position) lives in its TokenInput and is handed to the stack's
self-attention layers, which let it rotate queries and keys and bias the scores; cross-attention gets none.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from embinit.models.config import ModelConfig
from embinit.models.packing import Packing
from embinit.models.position import POSITION_ENCODINGS, PositionEncoding
from embinit.data.vocab import PAD


class Dropout(nn.Module):
    """Inverted dropout, as nn.Dropout, with a cheaper mask on the CPU.

    torch's CPU bernoulli_ dominates a small model's forward pass (about 3x the cost of drawing a quarter as
    many int64 numbers and reading them as 16-bit slices; docs/performance.md). Drop probability is
    round(p * 65536) / 65536 (0.100006 for p = 0.1). On CUDA this is plain F.dropout.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.threshold = round(p * 65536) - 32768  # int16 values below it are dropped

    def masks_weights_on(self, device: torch.device) -> bool:
        """Whether attention hands this module its weights to drop (the CPU's cheap mask), rather than letting SDPA
        draw its own."""
        return device.type == "cpu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        n = x.numel()
        draws = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
        keep = draws.view(torch.int16)[:n].view(x.shape) >= self.threshold
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))  # one float mask: one multiply each way


class TokenInput(nn.Module):
    """Token embedding x sqrt(D) through the position encoding's `embed`, then dropout.

    The embedding starts from the given N x D matrix (the initializer under study) and is frozen unless
    `config.trains_embedding(side)`. The position encoding is `config.pos_encoding` (embinit.models.position), one
    per stack: it is built here, and the stack's self-attention layers use it too; the decoder's is causal.
    """

    def __init__(self, embedding: np.ndarray, config: ModelConfig, side: str = "encoder"):
        super().__init__()
        position_encoding = POSITION_ENCODINGS.lookup(config.pos_encoding)
        dim = embedding.shape[1]
        self.scale = math.sqrt(dim)
        self.embedding = nn.Embedding.from_pretrained(
            torch.tensor(embedding, dtype=torch.float32), freeze=not config.trains_embedding(side)
        )
        self.position = position_encoding(dim, config, side == "decoder")
        self.dropout = Dropout(config.dropout)

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """(B, T) ids at positions start .. start + T - 1 -> (B, T, D)."""
        return self.dropout(self.position.embed(self.embedding(ids) * self.scale, start))

    def packed(self, ids: torch.Tensor, packing: Packing) -> torch.Tensor:
        """(B, T) ids from position 0 -> their real tokens' inputs, packed (n, D)."""
        x = packing.pad(self.embedding(packing.pack(ids[..., None])[:, 0]) * self.scale)
        return self.dropout(packing.pack(self.position.embed(x)))


class Encoder(nn.Module):
    """Token input and a stack of encoder layers: the translator's source side, and all of the classifier."""

    def __init__(self, embedding: np.ndarray, config: ModelConfig):
        super().__init__()
        self.input = TokenInput(embedding, config)
        self.layers = nn.ModuleList(EncoderLayer(embedding.shape[1], config) for _ in range(config.layers))
        self.norm = final_norm(embedding.shape[1], config)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) ids -> states (B, S, D) and keep (B, 1, 1, S), True at real (non-pad) tokens."""
        keep = key_padding(ids)
        x = self.input(ids)
        for layer in self.layers:
            x = layer(x, keep, self.input.position)
        return self.norm(x), keep

    def packed(self, ids: torch.Tensor, packing: Packing) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` on the real tokens only: states packed (n, D), and keep."""
        keep = key_padding(ids)
        x = self.input.packed(ids, packing)
        for layer in self.layers:
            x = layer.packed(x, keep, self.input.position, packing)
        return self.norm(x), keep


class MultiHeadAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"d_model {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.dropout = Dropout(dropout)  # on the attention weights
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        # a list: every `attend` appends its attention weights (B, heads, T, S), detached, for measurements
        self.weights_sink: list | None = None

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        keep: torch.Tensor | None = None,
        causal: bool = False,
        position: PositionEncoding | None = None,
    ) -> torch.Tensor:
        """x attends to context; `keep` (B, 1, 1, S) is True for context positions that are not padding.
        Self-attention passes its stack's `position` encoding (x and context then both start at position 0)."""
        return self.attend(x, *self.keys_values(context, position), keep, causal, position)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, heads, T, D / heads)."""
        return t.view(t.size(0), t.size(1), self.heads, -1).transpose(1, 2)

    def keys_values(
        self, context: torch.Tensor, position: PositionEncoding | None = None, start: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The context's keys, rotated by `position` at positions start .. (self-attention), and values,
        (B, heads, S, D / heads) each: computed once, reused by decoding."""
        k = self.split(self.key(context))
        if position is not None:
            k = position.rotate(k, start)
        return k, self.split(self.value(context))

    def attend(
        self,
        x: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        keep: torch.Tensor | None = None,
        causal: bool = False,
        position: PositionEncoding | None = None,
        start: int = 0,
    ) -> torch.Tensor:
        """x (B, T, D) at positions start .. start + T - 1 attends to keys and values (B, heads, S, D / heads);
        with a `position` encoding (self-attention) the keys are at 0 .. S - 1 and already rotated."""
        return self.out(self.core(self.split(self.query(x)), k, v, keep, causal, position, start))

    def packed(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        keep: torch.Tensor | None,
        causal: bool,
        position: PositionEncoding | None,
        queries: Packing,
        keys: Packing,
    ) -> torch.Tensor:
        """`forward` on packed queries x (n, D) and context (m, D): the projections on the real tokens, attention on
        them padded (`queries`, `keys`), the output projection on the real tokens again."""
        k = self.split(keys.pad(self.key(context)))
        if position is not None:
            k = position.rotate(k, 0)
        v = self.split(keys.pad(self.value(context)))
        y = self.core(self.split(queries.pad(self.query(x))), k, v, keep, causal, position, 0)
        return self.out(queries.pack(y))

    def core(self, q, k, v, keep, causal, position, start) -> torch.Tensor:
        """Queries (B, heads, T, D / heads) over keys and values: (B, T, D), heads joined, before the output projection."""
        batch, _, length, _ = q.shape
        bias = None
        if position is not None:
            q = position.rotate(q, start)
            bias = position.bias(start, length, k.size(2))  # (heads, T, S) or None
        if self.weights_sink is not None or (
            self.training and self.dropout.p > 0 and self.dropout.masks_weights_on(q.device)
        ):
            y = self._attend_with_cheap_dropout(q, k, v, keep, causal, bias)
        else:
            p = self.dropout.p if self.training else 0.0
            if bias is None:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal, dropout_p=p)
            else:  # SDPA takes one mask: the bias with -inf at masked keys
                mask = bias.to(q.dtype)
                if causal:
                    mask = mask.masked_fill(_future(length, k.size(2), q.device), float("-inf"))
                if keep is not None:
                    mask = mask.masked_fill(~keep, float("-inf"))  # (B, heads, T, S)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return y.transpose(1, 2).reshape(batch, length, -1)

    def _attend_with_cheap_dropout(self, q, k, v, keep, causal, bias=None) -> torch.Tensor:
        """SDPA's arithmetic, spelled out so the attention weights take the cheap CPU dropout mask: SDPA draws
        its own with bernoulli_ on the CPU (docs/performance.md). Also the path that hands the weights to
        `weights_sink` (on CUDA its dropout then draws other numbers than SDPA's)."""
        scores = (q * q.size(-1) ** -0.5) @ k.transpose(-2, -1)  # (B, heads, T, S)
        # added and masked in place: the product's output is not saved for its backward
        if bias is not None:
            scores += bias
        if keep is not None:
            scores.masked_fill_(~keep, float("-inf"))
        if causal:
            scores.masked_fill_(_future(*scores.shape[-2:], q.device), float("-inf"))
        weights = scores.softmax(-1)
        if self.weights_sink is not None:
            self.weights_sink.append(weights.detach())
        return self.dropout(weights) @ v


class FeedForward(nn.Sequential):
    def __init__(self, dim: int, ffn_dim: int, dropout: float):
        super().__init__(nn.Linear(dim, ffn_dim), nn.ReLU(), Dropout(dropout), nn.Linear(ffn_dim, dim))


class EncoderLayer(nn.Module):
    """Post-LN: x = LN(x + Dropout(Sublayer(x))) for self-attention, then the feed-forward block."""

    def __init__(self, dim: int, config: ModelConfig):
        super().__init__()
        self.attention = MultiHeadAttention(dim, config.heads, config.dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, config.ffn_dim, config.dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor, keep: torch.Tensor, position: PositionEncoding) -> torch.Tensor:
        """x (B, S, D), keep (B, 1, 1, S) -> (B, S, D); `position` is the stack's encoding."""
        x = self.norm1(x + self.dropout(self.attention(x, x, keep, position=position)))
        return self.norm2(x + self.dropout(self.ffn(x)))

    def packed(self, x: torch.Tensor, keep: torch.Tensor, position: PositionEncoding, packing: Packing) -> torch.Tensor:
        """`forward` on packed states (n, D)."""
        x = self.norm1(x + self.dropout(self.attention.packed(x, x, keep, False, position, packing, packing)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    """Post-LN: causal self-attention, attention over the encoder output, feed-forward."""

    def __init__(self, dim: int, config: ModelConfig):
        super().__init__()
        self.self_attention = MultiHeadAttention(dim, config.heads, config.dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attention = MultiHeadAttention(dim, config.heads, config.dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, config.ffn_dim, config.dropout)
        self.norm3 = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)

    def forward(
        self, y: torch.Tensor, memory: torch.Tensor, memory_keep: torch.Tensor, position: PositionEncoding
    ) -> torch.Tensor:
        """y (B, T, D) attends to itself causally and to memory (B, S, D) -> (B, T, D); `position` is the
        decoder stack's encoding (self-attention only)."""
        # Targets are right-padded, so the causal mask already hides every pad key from every real
        # position; outputs at pad positions are ignored by the loss.
        y = self.norm1(y + self.dropout(self.self_attention(y, y, causal=True, position=position)))
        y = self.norm2(y + self.dropout(self.cross_attention(y, memory, memory_keep)))
        return self.norm3(y + self.dropout(self.ffn(y)))

    def packed(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        memory_keep: torch.Tensor,
        position: PositionEncoding,
        targets: Packing,
        sources: Packing,
    ) -> torch.Tensor:
        """`forward` on packed decoder states y (n, D) and encoder memory (m, D)."""
        attend = self.self_attention.packed(y, y, None, True, position, targets, targets)
        y = self.norm1(y + self.dropout(attend))
        y = self.norm2(
            y + self.dropout(self.cross_attention.packed(y, memory, memory_keep, False, None, targets, sources))
        )
        return self.norm3(y + self.dropout(self.ffn(y)))

    def step(
        self, y: torch.Tensor, cache: "LayerCache", memory_keep: torch.Tensor, position: PositionEncoding
    ) -> torch.Tensor:
        """The next position only: y (B, 1, D) attends to the earlier positions' keys and values in `cache`
        (this position's are added, its key rotated at its own position) and to the encoder memory's,
        precomputed there."""
        p = cache.length
        cache.keys[:, :, p : p + 1], cache.values[:, :, p : p + 1] = self.self_attention.keys_values(y, position, p)
        cache.length += 1
        k, v = cache.keys[:, :, : cache.length], cache.values[:, :, : cache.length]
        y = self.norm1(y + self.dropout(self.self_attention.attend(y, k, v, position=position, start=p)))
        y = self.norm2(y + self.dropout(self.cross_attention.attend(y, *cache.memory, memory_keep)))
        return self.norm3(y + self.dropout(self.ffn(y)))


class LayerCache:
    """One decoder layer's state during incremental decoding: the self-attention keys and values of the
    positions decoded so far (preallocated to `max_len`) and the encoder memory's cross-attention keys
    and values, computed once per sentence batch."""

    def __init__(self, layer: DecoderLayer, memory: torch.Tensor, max_len: int):
        attention = layer.self_attention
        batch, dim = memory.size(0), memory.size(2)
        shape = (batch, attention.heads, max_len, dim // attention.heads)
        self.keys = memory.new_empty(shape)
        self.values = memory.new_empty(shape)
        self.length = 0
        self.memory = layer.cross_attention.keys_values(memory)


def final_norm(dim: int, config: ModelConfig) -> nn.Module:
    """The LayerNorm nn.Transformer puts after its encoder and its decoder stack (post-LN layers before it)."""
    return nn.LayerNorm(dim) if config.final_norm else nn.Identity()


def recipe_init(model: nn.Module) -> None:
    """nn.Transformer as the PyTorch translation recipe starts it: xavier_uniform_ on every weight matrix.

    The recipe's attention packs Q, K and V into one (3D x D) in_proj_weight, so theirs are the thirds of one Xavier
    draw over that shape (bound sqrt(6 / 4D)), with zero biases, and the out-projection bias is zero too
    (nn.MultiheadAttention._reset_parameters); every other Linear (feed-forward, output) keeps nn.Linear's own bias,
    U(+-1 / sqrt(fan_in)). LayerNorms keep 1 / 0; embeddings and position encodings are not touched here.
    """
    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    projections = {id(m.query) for m in attention} | {id(m.key) for m in attention} | {id(m.value) for m in attention}
    with torch.no_grad():
        for module in attention:
            packed = nn.init.xavier_uniform_(
                module.query.weight.new_empty(3 * module.query.in_features, module.query.in_features)
            )
            for linear, part in zip((module.query, module.key, module.value), packed.chunk(3)):
                linear.weight.copy_(part)
                linear.bias.zero_()
            module.out.bias.zero_()
        for module in model.modules():
            if isinstance(module, nn.Linear) and id(module) not in projections:
                nn.init.xavier_uniform_(module.weight)


def legacy_init(model: nn.Module) -> None:
    """Xavier-uniform for every linear weight (Q, K, V each its own D x D draw), zero biases; LayerNorms keep 1 / 0."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)


INITS = {"recipe": recipe_init, "legacy": legacy_init}  # ModelConfig.init -> how the non-embedding weights start


def _future(queries: int, keys: int, device: torch.device) -> torch.Tensor:
    """(T, S) mask, True where key j comes after query i (j > i): what causal attention hides."""
    return torch.ones(queries, keys, dtype=torch.bool, device=device).triu(1)


def key_padding(ids: torch.Tensor) -> torch.Tensor:
    """(B, S) ids -> (B, 1, 1, S) mask, True where a key is a real token."""
    return (ids != PAD)[:, None, None, :]
