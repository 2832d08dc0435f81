"""Our translator against the paper's model: torch's own nn.Transformer as the PyTorch translation recipe builds it
(token embedding x sqrt(D), sinusoidal P, dropout; nn.Transformer(D, heads, 3 + 3 layers, FFN 512, dropout 0.1);
a Linear generator; xavier_uniform_ on every parameter of more than one dimension). Same weights give the same
logits, and `model.init: recipe` starts the weights from the same distributions as the recipe does."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from embinit.data.vocab import PAD
from embinit.models import ModelConfig, Translator

DIM, HEADS, FFN, LAYERS = 32, 4, 48, 3


class RecipeTranslator(nn.Module):
    """The recipe's Seq2Seq model, sequence-first as it is written there."""

    def __init__(self, n_src: int, n_tgt: int, dim: int, heads: int, ffn: int, layers: int, max_len: int = 5000):
        super().__init__()
        self.transformer = nn.Transformer(
            d_model=dim,
            nhead=heads,
            num_encoder_layers=layers,
            num_decoder_layers=layers,
            dim_feedforward=ffn,
            dropout=0.1,
        )
        self.generator = nn.Linear(dim, n_tgt)
        self.src_embedding = nn.Embedding(n_src, dim)
        self.tgt_embedding = nn.Embedding(n_tgt, dim)
        self.dropout = nn.Dropout(0.1)
        # P[pos, 2i] = sin(pos / 10000^(2i / D)), P[pos, 2i + 1] = cos(...), written out as the recipe does
        inverse = torch.exp(-torch.arange(0, dim, 2) * math.log(10000) / dim)
        position = torch.arange(0, max_len).reshape(max_len, 1)
        table = torch.zeros((max_len, dim))
        table[:, 0::2] = torch.sin(position * inverse)
        table[:, 1::2] = torch.cos(position * inverse)
        self.register_buffer("table", table.unsqueeze(-2))  # (max_len, 1, D)
        self.scale = math.sqrt(dim)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def embed(self, embedding: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        x = embedding(ids) * self.scale  # (T, B, D)
        return self.dropout(x + self.table[: x.size(0)])

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """(S, B) and (T, B) ids -> (T, B, N) logits, with the recipe's masks."""
        causal = torch.triu(torch.full((tgt.size(0), tgt.size(0)), float("-inf")), diagonal=1)
        src_mask = torch.zeros((src.size(0), src.size(0)), dtype=torch.bool)
        states = self.transformer(
            self.embed(self.src_embedding, src),
            self.embed(self.tgt_embedding, tgt),
            src_mask,
            causal,
            None,
            (src == PAD).T,
            (tgt == PAD).T,
            (src == PAD).T,
        )
        return self.generator(states)


def copy_into_recipe(ours: Translator, recipe: RecipeTranslator) -> None:
    """Our weights into the recipe's modules: Q, K, V stacked into in_proj, the feed-forward's two Linears."""

    def attention(theirs: nn.MultiheadAttention, mine) -> None:
        theirs.in_proj_weight.copy_(torch.cat([mine.query.weight, mine.key.weight, mine.value.weight]))
        theirs.in_proj_bias.copy_(torch.cat([mine.query.bias, mine.key.bias, mine.value.bias]))
        theirs.out_proj.load_state_dict(mine.out.state_dict())

    def feed_forward(theirs, mine) -> None:
        theirs.linear1.load_state_dict(mine.ffn[0].state_dict())
        theirs.linear2.load_state_dict(mine.ffn[3].state_dict())

    with torch.no_grad():
        for theirs, mine in zip(recipe.transformer.encoder.layers, ours.encoder.layers):
            attention(theirs.self_attn, mine.attention)
            feed_forward(theirs, mine)
            theirs.norm1.load_state_dict(mine.norm1.state_dict())
            theirs.norm2.load_state_dict(mine.norm2.state_dict())
        for theirs, mine in zip(recipe.transformer.decoder.layers, ours.decoder):
            attention(theirs.self_attn, mine.self_attention)
            attention(theirs.multihead_attn, mine.cross_attention)
            feed_forward(theirs, mine)
            for k in (1, 2, 3):
                getattr(theirs, f"norm{k}").load_state_dict(getattr(mine, f"norm{k}").state_dict())
        recipe.transformer.encoder.norm.load_state_dict(ours.encoder.norm.state_dict())
        recipe.transformer.decoder.norm.load_state_dict(ours.decoder_norm.state_dict())
        recipe.generator.load_state_dict(ours.output.state_dict())
        recipe.src_embedding.weight.copy_(ours.encoder.input.embedding.weight)
        recipe.tgt_embedding.weight.copy_(ours.decoder_input.embedding.weight)


def ragged_batch(n: int, vocab: int, lengths: list[int], seed: int) -> torch.Tensor:
    """(B, T) ids right-padded with <pad>, real ids 4 .. vocab - 1 (above the specials)."""
    rng = np.random.default_rng(seed)
    out = np.full((len(lengths), max(lengths)), PAD, dtype=np.int64)
    for row, length in enumerate(lengths):
        out[row, :length] = rng.integers(4, vocab, size=length)
    return torch.from_numpy(out)


def translator(init: str = "recipe", final_norm: bool = True, seed: int = 0, n_src=40, n_tgt=30) -> Translator:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = ModelConfig(heads=HEADS, ffn_dim=FFN, layers=LAYERS, max_len=64, init=init, final_norm=final_norm)
    embeddings = [rng.uniform(-0.1, 0.1, size=(n, DIM)).astype(np.float32) for n in (n_src, n_tgt)]
    return Translator(*embeddings, config)


def randomize_norms(model: nn.Module) -> nn.Module:
    """LayerNorms away from 1 / 0 (as training leaves them), so that where each one sits shows in the output."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    return model


def test_translator_equals_the_recipes_nn_transformer_weight_for_weight():
    ours = randomize_norms(translator()).eval()
    recipe = RecipeTranslator(40, 30, DIM, HEADS, FFN, LAYERS).eval()
    copy_into_recipe(ours, recipe)
    src = ragged_batch(40, 40, [9, 5, 7, 3], seed=1)
    tgt = ragged_batch(30, 30, [6, 8, 2, 5], seed=2)
    with torch.no_grad():
        mine = ours(src, tgt)  # (B, T, N)
        theirs = recipe(src.T, tgt.T).transpose(0, 1)
    real = tgt != PAD  # a pad position's output is not used (the loss skips it; the recipe masks its key too)
    torch.testing.assert_close(mine[real], theirs[real], rtol=1e-5, atol=1e-5)
    # the comparison sees the stacks' final LayerNorms: without them (the first model) the logits differ
    without = translator(final_norm=False).eval()
    without.load_state_dict({k: v for k, v in ours.state_dict().items() if k in without.state_dict()})
    with torch.no_grad():
        assert not torch.allclose(without(src, tgt)[real], theirs[real], atol=1e-2)


def recipe_parameters(model: Translator) -> dict[str, torch.Tensor]:
    """Our translator's parameters under the recipe's names for them (Q, K, V stacked as in_proj)."""
    named = {}
    stacks = [("encoder", layer) for layer in model.encoder.layers] + [("decoder", layer) for layer in model.decoder]
    for i, (stack, layer) in enumerate(stacks):
        blocks = [("self_attn", layer.attention if stack == "encoder" else layer.self_attention)]
        if stack == "decoder":
            blocks.append(("multihead_attn", layer.cross_attention))
        for name, mha in blocks:
            named[f"{stack}{i}.{name}.in_proj_weight"] = torch.cat([mha.query.weight, mha.key.weight, mha.value.weight])
            named[f"{stack}{i}.{name}.in_proj_bias"] = torch.cat([mha.query.bias, mha.key.bias, mha.value.bias])
            named[f"{stack}{i}.{name}.out_proj.weight"] = mha.out.weight
            named[f"{stack}{i}.{name}.out_proj.bias"] = mha.out.bias
        for k, index in (("linear1", 0), ("linear2", 3)):
            named[f"{stack}{i}.{k}.weight"] = layer.ffn[index].weight
            named[f"{stack}{i}.{k}.bias"] = layer.ffn[index].bias
    for stack, norm in (("encoder", model.encoder.norm), ("decoder", model.decoder_norm)):
        if isinstance(norm, nn.LayerNorm):  # model.final_norm
            named[f"{stack}.norm.weight"], named[f"{stack}.norm.bias"] = norm.weight, norm.bias
    named["generator.weight"], named["generator.bias"] = model.output.weight, model.output.bias
    return named


def recipe_reference(model: RecipeTranslator) -> dict[str, torch.Tensor]:
    """The recipe model's parameters under the same names as recipe_parameters."""
    named = {}
    encoder = list(model.transformer.encoder.layers)
    for i, layer in enumerate(encoder + list(model.transformer.decoder.layers)):
        stack = "encoder" if i < len(encoder) else "decoder"
        for name, p in layer.named_parameters():
            if not name.startswith("norm"):
                named[f"{stack}{i}.{name}"] = p
    for stack in ("encoder", "decoder"):
        norm = getattr(model.transformer, stack).norm
        named[f"{stack}.norm.weight"], named[f"{stack}.norm.bias"] = norm.weight, norm.bias
    named["generator.weight"], named["generator.bias"] = model.generator.weight, model.generator.bias
    return named


@pytest.mark.parametrize("init, final_norm, matches", [("recipe", True, True), ("legacy", True, False)])
def test_initial_parameters_are_drawn_as_the_recipe_draws_them(init, final_norm, matches):
    """Each weight's bound and spread, each bias's, at the paper's D = 300 and FFN 512: the recipe's packed Q, K, V
    draw (bound sqrt(6 / 4D)), zero attention biases, nn.Linear's default bias elsewhere. The first model (legacy)
    differs and the comparison says so."""
    dim, n_src, n_tgt = 300, 700, 600
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    embeddings = [rng.uniform(-0.1, 0.1, size=(n, dim)).astype(np.float32) for n in (n_src, n_tgt)]
    config = ModelConfig(heads=10, init=init, final_norm=final_norm)
    ours = Translator(*embeddings, config)
    reference = recipe_reference(RecipeTranslator(n_src, n_tgt, dim, 10, 512, 3))
    mine = recipe_parameters(ours)
    differ = []
    for name, theirs in reference.items():
        if name not in mine:
            differ.append(f"{name}: missing")
            continue
        a, b = mine[name].detach(), theirs.detach()
        assert a.shape == b.shape, name
        if torch.count_nonzero(b) == 0 or torch.all(b == 1):  # constant: zero biases, LayerNorm ones and zeros
            if not torch.equal(a, b):
                differ.append(f"{name}: not {b.flatten()[0].item()}")
            continue
        bound = b.abs().max().item()
        if a.abs().max().item() > bound * 1.02 or not 0.9 < a.std().item() / b.std().item() < 1.1:
            differ.append(f"{name}: max {a.abs().max().item():.4f} vs {bound:.4f}, std {a.std():.4f} vs {b.std():.4f}")
    assert (not differ) == matches, differ
