"""Encoder-decoder transformer for translation (SPEC section 3), written out layer by layer.

Vaswani et al. (2017) with the paper's sizes: d_model = D (the embedding dimension), post-LN, ReLU
feed-forward of width `ffn_dim`, dropout 0.1, and a decoder output projection that is not tied to the
embedding. Attention goes through F.scaled_dot_product_attention. The classifier reuses these layers.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from embinit.models.loss import linear_cross_entropy
from embinit.posenc import sinusoidal_table
from embinit.vocab import BOS, EOS, PAD

POS_ENCODINGS = ("sinusoidal", "learned", "none")


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        n = x.numel()
        draws = torch.randint(-2**63, 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
        keep = draws.view(torch.int16)[:n].view(x.shape) >= self.threshold
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))  # one float mask: one multiply each way


class TokenInput(nn.Module):
    """Token embedding * sqrt(D) + position encoding, then dropout.

    The embedding starts from the given N x D matrix (the initializer under study) and is frozen when
    `trainable` is false. Position encoding: a fixed sinusoidal table, a learned table, or none.
    """

    def __init__(self, embedding: np.ndarray, trainable: bool, pos_encoding: str, max_len: int,
                 pos_base: float, dropout: float):
        super().__init__()
        if pos_encoding not in POS_ENCODINGS:
            raise ValueError(f"pos_encoding must be one of {POS_ENCODINGS}, not {pos_encoding!r}")
        dim = embedding.shape[1]
        self.scale = math.sqrt(dim)
        self.embedding = nn.Embedding.from_pretrained(torch.tensor(embedding, dtype=torch.float32),
                                                      freeze=not trainable)
        self.pos_encoding = pos_encoding
        if pos_encoding == "sinusoidal":
            table = torch.from_numpy(sinusoidal_table(max_len, dim, pos_base))
            self.register_buffer("positions", table, persistent=False)
        elif pos_encoding == "learned":
            self.positions = nn.Embedding(max_len, dim)
            nn.init.xavier_uniform_(self.positions.weight)
        self.dropout = Dropout(dropout)

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """(B, T) ids at positions start .. start + T - 1 -> (B, T, D)."""
        x = self.embedding(ids) * self.scale
        end = start + ids.size(1)
        if self.pos_encoding == "sinusoidal":
            x = x + self.positions[start:end]
        elif self.pos_encoding == "learned":
            x = x + self.positions.weight[start:end]
        return self.dropout(x)


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

    def forward(self, x: torch.Tensor, context: torch.Tensor, keep: torch.Tensor | None = None,
                causal: bool = False) -> torch.Tensor:
        """x attends to context; `keep` (B, 1, 1, S) is True for context positions that are not padding."""
        return self.attend(x, *self.keys_values(context), keep, causal)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, heads, T, D / heads)."""
        return t.view(t.size(0), t.size(1), self.heads, -1).transpose(1, 2)

    def keys_values(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The context's keys and values, (B, heads, S, D / heads) each: computed once, reused by decoding."""
        return self.split(self.key(context)), self.split(self.value(context))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor | None = None,
               causal: bool = False) -> torch.Tensor:
        batch, length, dim = x.shape
        q = self.split(self.query(x))  # (B, heads, T, D / heads)
        if self.training and self.dropout.p > 0 and x.device.type == "cpu":
            y = self._attend_with_cheap_dropout(q, k, v, keep, causal)
        else:
            p = self.dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal, dropout_p=p)
        return self.out(y.transpose(1, 2).reshape(batch, length, dim))

    def _attend_with_cheap_dropout(self, q, k, v, keep, causal) -> torch.Tensor:
        """SDPA's arithmetic, spelled out so the attention weights take the cheap CPU dropout mask: SDPA draws
        its own with bernoulli_ on the CPU (docs/performance.md)."""
        scores = (q * q.size(-1) ** -0.5) @ k.transpose(-2, -1)  # (B, heads, T, S)
        # masked in place: the product's output is not saved for its backward
        if keep is not None:
            scores.masked_fill_(~keep, float("-inf"))
        if causal:
            scores.masked_fill_(torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1),
                                float("-inf"))
        return self.dropout(scores.softmax(-1)) @ v


class FeedForward(nn.Sequential):
    def __init__(self, dim: int, ffn_dim: int, dropout: float):
        super().__init__(nn.Linear(dim, ffn_dim), nn.ReLU(), Dropout(dropout), nn.Linear(ffn_dim, dim))


class EncoderLayer(nn.Module):
    """Post-LN: x = LN(x + Dropout(Sublayer(x))) for self-attention, then the feed-forward block."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, dropout: float):
        super().__init__()
        self.attention = MultiHeadAttention(dim, heads, dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, ffn_dim, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, x, keep)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    """Post-LN: causal self-attention, attention over the encoder output, feed-forward."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, dropout: float):
        super().__init__()
        self.self_attention = MultiHeadAttention(dim, heads, dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attention = MultiHeadAttention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, ffn_dim, dropout)
        self.norm3 = nn.LayerNorm(dim)
        self.dropout = Dropout(dropout)

    def forward(self, y: torch.Tensor, memory: torch.Tensor, memory_keep: torch.Tensor) -> torch.Tensor:
        # Targets are right-padded, so the causal mask already hides every pad key from every real
        # position; outputs at pad positions are ignored by the loss.
        y = self.norm1(y + self.dropout(self.self_attention(y, y, causal=True)))
        y = self.norm2(y + self.dropout(self.cross_attention(y, memory, memory_keep)))
        return self.norm3(y + self.dropout(self.ffn(y)))

    def step(self, y: torch.Tensor, cache: "LayerCache", memory_keep: torch.Tensor) -> torch.Tensor:
        """The next position only: y (B, 1, D) attends to the earlier positions' keys and values in `cache`
        (this position's are added) and to the encoder memory's, precomputed there."""
        position = cache.length
        cache.keys[:, :, position : position + 1], cache.values[:, :, position : position + 1] = (
            self.self_attention.keys_values(y))
        cache.length += 1
        k, v = cache.keys[:, :, : cache.length], cache.values[:, :, : cache.length]
        y = self.norm1(y + self.dropout(self.self_attention.attend(y, k, v)))
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


def xavier_init(model: nn.Module) -> None:
    """Xavier-uniform for every linear weight, zero biases; LayerNorms keep 1 / 0 (SPEC section 1)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)


def key_padding(ids: torch.Tensor) -> torch.Tensor:
    """(B, S) ids -> (B, 1, 1, S) mask, True where a key is a real token."""
    return (ids != PAD)[:, None, None, :]


class Translator(nn.Module):
    def __init__(self, src_embedding: np.ndarray, tgt_embedding: np.ndarray, *, heads: int,
                 ffn_dim: int = 512, layers: int = 3, dropout: float = 0.1, pos_encoding: str = "sinusoidal",
                 pos_base: float = 10000, max_len: int = 256, embedding_trainable: bool = True):
        super().__init__()
        dim = src_embedding.shape[1]
        if tgt_embedding.shape[1] != dim:
            raise ValueError(f"encoder and decoder embeddings differ in D: {dim} vs {tgt_embedding.shape[1]}")
        self.max_len = max_len
        self.src_input = TokenInput(src_embedding, embedding_trainable, pos_encoding, max_len, pos_base, dropout)
        self.tgt_input = TokenInput(tgt_embedding, embedding_trainable, pos_encoding, max_len, pos_base, dropout)
        self.encoder = nn.ModuleList(EncoderLayer(dim, heads, ffn_dim, dropout) for _ in range(layers))
        self.decoder = nn.ModuleList(DecoderLayer(dim, heads, ffn_dim, dropout) for _ in range(layers))
        self.generator = nn.Linear(dim, tgt_embedding.shape[0])
        xavier_init(self)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = key_padding(src)
        x = self.src_input(src)
        for layer in self.encoder:
            x = layer(x, keep)
        return x, keep

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, memory_keep: torch.Tensor) -> torch.Tensor:
        """Decoder states (B, T, D) for every prefix of tgt; self.generator turns them into logits."""
        y = self.tgt_input(tgt)
        for layer in self.decoder:
            y = layer(y, memory, memory_keep)
        return y

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, T, N_dec) for every prefix of tgt (teacher forcing)."""
        memory, keep = self.encode(src)
        return self.generator(self.decode(tgt, memory, keep))

    def loss(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Summed teacher-forced cross-entropy of tgt[:, 1:] given tgt[:, :-1], over its real (non-pad) tokens.

        The output projection runs only on those tokens, fused with the loss (embinit.models.loss).
        """
        memory, keep = self.encode(src)
        states = self.decode(tgt[:, :-1], memory, keep)  # (B, T - 1, D)
        gold = tgt[:, 1:]
        real = (gold != PAD).flatten().nonzero()[:, 0]  # (n,)
        return linear_cross_entropy(states.flatten(0, 1)[real], self.generator.weight, self.generator.bias,
                                    gold.flatten()[real])

    @torch.no_grad()
    def generate(self, src: torch.Tensor, max_extra: int) -> torch.Tensor:
        """Batched greedy search with a key/value cache: each step runs the decoder on one new position.

        Each sentence stops at its <eos> or at its source length + max_extra (at most max_len - 1 tokens).
        Returns (B, T) generated ids without the leading <bos>; finished sentences are padded with <pad>.
        """
        memory, keep = self.encode(src)  # (B, S, D)
        steps = min(int((src != PAD).sum(1).max()) + max_extra, self.max_len - 1)
        limits = (src != PAD).sum(1) + max_extra
        caches = [LayerCache(layer, memory, steps) for layer in self.decoder]
        token = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        out = []
        for step in range(1, steps + 1):
            y = self.tgt_input(token, start=step - 1)  # (B, 1, D)
            for layer, cache in zip(self.decoder, caches):
                y = layer.step(y, cache, keep)
            token = self.generator(y[:, -1]).argmax(-1).masked_fill(done, PAD)[:, None]  # (B, 1)
            out.append(token)
            done |= (token[:, 0] == EOS) | (step >= limits)
            if done.all():
                break
        return torch.cat(out, dim=1)

    def num_parameters(self) -> int:
        """All parameters, frozen embeddings included (the count the paper's Table 5 reports)."""
        return sum(p.numel() for p in self.parameters())


def encoder_layer_parameters(dim: int, ffn_dim: int) -> int:
    attention = 4 * (dim * dim + dim)
    ffn = dim * ffn_dim + ffn_dim + ffn_dim * dim + dim
    return attention + ffn + 2 * (2 * dim)


def decoder_layer_parameters(dim: int, ffn_dim: int) -> int:
    return encoder_layer_parameters(dim, ffn_dim) + 4 * (dim * dim + dim) + 2 * dim


def expected_parameters(n_src: int, n_tgt: int, dim: int, ffn_dim: int = 512, layers: int = 3,
                        pos_encoding: str = "sinusoidal", max_len: int = 256) -> int:
    """Closed form of Translator.num_parameters()."""
    positions = max_len * dim if pos_encoding == "learned" else 0
    embeddings = (n_src + n_tgt) * dim + 2 * positions
    stacks = layers * (encoder_layer_parameters(dim, ffn_dim) + decoder_layer_parameters(dim, ffn_dim))
    return embeddings + stacks + dim * n_tgt + n_tgt
