"""Encoder-decoder transformer for translation (SPEC section 3), with greedy decoding and its loss.

Vaswani et al. (2017) with the paper's sizes (embinit.models.config): d_model = D (the embedding dimension).
The output projection's weight is coupled to the decoder's embedding as `config.output_embedding` says:
`untied` (its own, Xavier-initialized: the paper's), `tied` (the same parameter, as Vaswani et al.) or
`initialized` (its own, started as a copy of the decoder's initial embedding, the layer under study).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from embinit.models.config import ModelConfig
from embinit.models.layers import INITS, DecoderLayer, Encoder, LayerCache, TokenInput, final_norm
from embinit.models.loss import linear_cross_entropy, padded_cross_entropy
from embinit.models.packing import Packing
from embinit.data.vocab import BOS, EOS, PAD


class Translator(nn.Module):
    def __init__(self, src_embedding: np.ndarray, tgt_embedding: np.ndarray, config: ModelConfig):
        super().__init__()
        dim = src_embedding.shape[1]
        if tgt_embedding.shape[1] != dim:
            raise ValueError(f"encoder and decoder embeddings differ in D: {dim} vs {tgt_embedding.shape[1]}")
        self.max_len = config.max_len
        self.encoder = Encoder(src_embedding, config)
        self.decoder_input = TokenInput(tgt_embedding, config, side="decoder")
        self.decoder = nn.ModuleList(DecoderLayer(dim, config) for _ in range(config.layers))
        self.decoder_norm = final_norm(dim, config)
        self.output = nn.Linear(dim, tgt_embedding.shape[0])
        INITS[config.init](self)
        # coupled after the init, which must not overwrite it; every other weight is then the same as untied's for
        # the same seed
        embedding = self.decoder_input.embedding.weight
        if config.output_embedding == "tied":  # one parameter: a frozen embedding freezes the projection too
            self.output.weight = embedding
        elif config.output_embedding == "initialized":
            with torch.no_grad():
                self.output.weight.copy_(embedding)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) source ids -> memory (B, S, D) and its keep mask (B, 1, 1, S)."""
        return self.encoder(src)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, memory_keep: torch.Tensor) -> torch.Tensor:
        """Decoder states (B, T, D) for every prefix of tgt; self.output turns them into logits."""
        y = self.decoder_input(tgt)
        for layer in self.decoder:
            y = layer(y, memory, memory_keep, self.decoder_input.position)
        return self.decoder_norm(y)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, T, N_dec) for every prefix of tgt (teacher forcing)."""
        memory, keep = self.encode(src)
        return self.output(self.decode(tgt, memory, keep))

    @staticmethod
    def loss_terms(tgt: torch.Tensor) -> int:
        """How many terms `loss` sums for these (host) targets: the real tokens after <bos>, counted by numpy, so
        no tensor is read back."""
        return int(np.count_nonzero(tgt[:, 1:].numpy() != PAD))

    def loss(self, src: torch.Tensor, tgt: torch.Tensor, fused: bool = True, packed: bool = False) -> torch.Tensor:
        """Summed teacher-forced cross-entropy of tgt[:, 1:] given tgt[:, :-1], over its real (non-pad) tokens.

        `fused` (the CPU's path): the output projection runs only on the real tokens, fused with the loss
        (embinit.models.loss); else (CUDA's) one library cross-entropy over the padded logits. Same value.
        `packed` (`train.packed`): every position-wise layer runs on the real tokens only (embinit.models.packing).
        """
        if packed:
            return self.packed_loss(src, tgt, fused)
        memory, keep = self.encode(src)
        return self.output_loss(self.decode(tgt[:, :-1], memory, keep), tgt[:, 1:], fused)

    def packed_loss(self, src: torch.Tensor, tgt: torch.Tensor, fused: bool) -> torch.Tensor:
        """`loss` with the position-wise layers on the real tokens: the same sum, up to float rounding."""
        inputs, gold = tgt[:, :-1], tgt[:, 1:]
        sources, targets = Packing.of(src), Packing.of(inputs)
        memory, keep = self.encoder.packed(src, sources)
        y = self.decoder_input.packed(inputs, targets)
        for layer in self.decoder:
            y = layer.packed(y, memory, keep, self.decoder_input.position, targets, sources)
        y, gold = self.decoder_norm(y), targets.pack(gold[..., None])[:, 0]  # gold at each real input token
        real = (gold != PAD).nonzero()[:, 0]  # an input's <eos> has no next token
        if fused:
            return linear_cross_entropy(y[real], self.output.weight, self.output.bias, gold[real])
        return padded_cross_entropy(y, self.output.weight, self.output.bias, gold, ignore_index=PAD)

    def output_loss(self, states: torch.Tensor, gold: torch.Tensor, fused: bool = True) -> torch.Tensor:
        """The loss's last part: decoder states (B, T, D) through the output projection, against gold (B, T)."""
        if not fused:
            return padded_cross_entropy(states, self.output.weight, self.output.bias, gold, ignore_index=PAD)
        real = (gold != PAD).flatten().nonzero()[:, 0]  # (n,)
        return linear_cross_entropy(
            states.flatten(0, 1)[real], self.output.weight, self.output.bias, gold.flatten()[real]
        )

    @torch.no_grad()
    def generate(self, src: torch.Tensor, max_extra: int, check_every: int = 1) -> torch.Tensor:
        """Batched greedy search with a key/value cache: each step runs the decoder on one new position.

        Each sentence stops at its <eos> or at its source length + max_extra (at most max_len - 1 tokens).
        Returns (B, T) generated ids without the leading <bos>; finished sentences are padded with <pad>. Whether
        every sentence has finished is asked every `check_every` steps (each answer waits for the device), so up
        to check_every - 1 trailing columns of <pad> may follow; the sentences are the same.
        """
        memory, keep = self.encode(src)  # (B, S, D)
        steps = min(int((src != PAD).sum(1).max()) + max_extra, self.max_len - 1)
        limits = (src != PAD).sum(1) + max_extra
        caches = [LayerCache(layer, memory, steps) for layer in self.decoder]
        token = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        out = []
        for step in range(1, steps + 1):
            y = self.decoder_input(token, start=step - 1)  # (B, 1, D)
            for layer, cache in zip(self.decoder, caches):
                y = layer.step(y, cache, keep, self.decoder_input.position)
            token = self.output(self.decoder_norm(y[:, -1])).argmax(-1).masked_fill(done, PAD)[:, None]  # (B, 1)
            out.append(token)
            done |= (token[:, 0] == EOS) | (step >= limits)
            if step % check_every == 0 and done.all():
                break
        return torch.cat(out, dim=1)

    def num_parameters(self) -> int:
        """All parameters, frozen embeddings included (the count the paper's Table 5 reports); a tied output
        weight counts once."""
        return sum(p.numel() for p in self.parameters())
