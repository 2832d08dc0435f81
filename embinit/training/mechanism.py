"""Mechanism metrics: the two explanations the paper gives but never measures, measured every epoch.

The paper says large pre-trained values saturate the network, and that the embedding, scaled by sqrt(D),
"absorbs" the position encoding added to it. After each epoch's validation, on a fixed probe (the first
`train.mechanism_probe` validation sentences, default PROBE, batched as evaluation batches them), in eval mode:

- `sigma_<side>`: the sample standard deviation (ddof 1, as Table 2's) of each input embedding layer's weight;
- `input_ratio_<side>`: ||x sqrt(D)|| / ||P|| (norms over all of the probe's real tokens at the side's input),
  where P is what the side's position encoding adds to a zero input (`embed`; NaN when it adds nothing: no
  position encoding, or one that acts inside attention: rotary, relative). The decoder's real tokens are those
  the loss scores (targets but the last, where the next token is real), here and for attention's query rows;
- `entropy_<module>` / `saturation_<module>`, per attention module (`encoder_<i>`, `decoder_self_<i>`,
  `decoder_cross_<i>`, layers from 0): the mean over real query rows (every head) of the attention weights'
  entropy -sum w log w, and the share of those rows whose largest weight exceeds SATURATED. Weights come from
  `MultiHeadAttention.weights_sink` (after masks and softmax, before dropout); masked keys weigh 0. A causal
  row with one admissible key (the decoder's first position) is saturated by construction: the same for
  every initializer;
- `grad_norm_embedding` / `grad_norm_other`: the L2 norm of the gradient of the probe's mean loss with respect
  to the trainable input embedding weights (0.0 when frozen; an output projection tied to the decoder's
  embedding is that parameter, so its gradient counts here) and to every other trainable parameter.

The probe is one forward and backward pass per probe batch in fp32, without an optimizer step; the gradients
the parameters held before are put back, and no RNG is drawn from (eval mode: no dropout), so a run's
trajectory is bit-identical with the metrics on or off (config `train.mechanism`, default on).
"""

from __future__ import annotations

import math
import re

import numpy as np
import torch
import torch.nn as nn

from embinit.data.vocab import PAD
from embinit.models.layers import MultiHeadAttention, TokenInput
from embinit.models.translator import Translator
from embinit.training.batching import sorted_batches
from embinit.training.epoch import batch_loss

PROBE = 256  # validation sentences in the probe (config `train.mechanism_probe` overrides)
SATURATED = 0.99  # a query row is saturated when its largest attention weight exceeds this


def enabled(train_cfg: dict) -> bool:
    """Whether a run measures the mechanism metrics (config `train.mechanism`, default on)."""
    return bool(train_cfg.get("mechanism", True))


def probe_size(train_cfg: dict) -> int:
    return int(train_cfg.get("mechanism_probe", PROBE))


def probe_batches(data, probe: int, batch_size: int) -> list[np.ndarray]:
    """The probe: the first `probe` sentences of the split, in evaluation batches (sorted by length)."""
    n = min(probe, len(data))
    return sorted_batches(data.lengths()[:n], batch_size)


def input_layers(model: nn.Module) -> dict[str, tuple[str, TokenInput]]:
    """side -> (module path, TokenInput): encoder (and decoder for the translator)."""
    paths = {module: path for path, module in model.named_modules()}
    layers = {"encoder": model.encoder.input}
    if isinstance(model, Translator):
        layers["decoder"] = model.decoder_input
    return {side: (paths[layer], layer) for side, layer in layers.items()}


def embedding_keys(model: nn.Module) -> dict[str, str]:
    """side -> the state_dict key of its input embedding weight."""
    return {side: f"{path}.embedding.weight" for side, (path, _) in input_layers(model).items()}


def attention_modules(model: nn.Module) -> dict[str, tuple[MultiHeadAttention, str]]:
    """Column name (`encoder_0`, `decoder_self_0`, `decoder_cross_0`, ...) -> (module, the side of its queries).

    Named from the module path: its first part is the stack (encoder or decoder: also the side whose tokens
    are the queries), the first number is the layer, and the attribute (`self_attention`, `cross_attention`)
    names the kind; a stack's plain `attention` is its only kind."""
    found = {}
    for path, module in model.named_modules():
        if not isinstance(module, MultiHeadAttention):
            continue
        parts = path.split(".")
        stack, layer = parts[0], next(p for p in parts if p.isdigit())
        kind = re.sub(r"_?attention$", "", parts[-1])
        found[f"{stack}_{kind}_{layer}" if kind else f"{stack}_{layer}"] = (module, stack)
    return found


def side_ids(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """side -> (the ids its input layer reads in the loss's forward pass, True at its real tokens).

    The decoder reads the targets but the last; its real tokens are those whose next token is real (the ones
    the loss scores: a shorter sentence's <eos> is read, as padding is, but predicts nothing)."""
    if isinstance(model, Translator):
        return {"encoder": (inputs, inputs != PAD), "decoder": (targets[:, :-1], targets[:, 1:] != PAD)}
    return {"encoder": (inputs, inputs != PAD)}


def attention_stats(weights: torch.Tensor, real: torch.Tensor) -> tuple[float, float, int]:
    """(summed entropy, saturated rows, rows) over the real query rows of every head.

    weights (B, heads, T, S), each row summing to 1 over its admissible keys (0 elsewhere); real (B, T) True at
    real query positions."""
    weights = weights.detach().float()
    rows = real[:, None, :].expand(weights.shape[:3])  # (B, heads, T)
    entropy = -torch.special.xlogy(weights, weights).sum(-1)  # 0 log 0 = 0: masked keys add nothing
    saturated = weights.amax(-1) > SATURATED
    return float(entropy[rows].double().sum()), float(saturated[rows].sum()), int(rows.sum())


@torch.no_grad()
def _input_norms(layer: TokenInput, ids: torch.Tensor, real: torch.Tensor) -> tuple[float, float]:
    """(sum of ||x sqrt(D)||^2, sum of ||P||^2) over the real tokens (`real`, B x T) of ids (B, T)."""
    x = layer.embedding(ids) * layer.scale
    p = layer.position.embed(torch.zeros_like(x))  # what the encoding adds, at positions 0 .. T - 1
    return float(x.double().square().sum(-1)[real].sum()), float(p.double().square().sum(-1)[real].sum())


def measure(model: nn.Module, data, batch_size: int, device: torch.device, probe: int = PROBE) -> dict[str, float]:
    """The mechanism metrics of `model` on the first `probe` sentences of `data` (see the module docstring).

    Leaves the model in eval mode with its parameters, and the gradients they held, as they were."""
    model.eval()
    inputs, attention = input_layers(model), attention_modules(model)
    batches = [data.batch(indices) for indices in probe_batches(data, probe, batch_size)]
    terms = sum(model.loss_terms(targets) for _, targets in batches)
    params = [p for p in model.parameters() if p.requires_grad]
    held = [p.grad for p in params]
    norms = {side: [0.0, 0.0] for side in inputs}
    stats = {name: [0.0, 0.0, 0] for name in attention}
    try:
        for p in params:
            p.grad = None
        for batch in batches:
            ids = {side: (t.to(device), real.to(device)) for side, (t, real) in side_ids(model, *batch).items()}
            for side, (_, layer) in inputs.items():
                x, p = _input_norms(layer, *ids[side])
                norms[side][0] += x
                norms[side][1] += p
            for module, _ in attention.values():
                module.weights_sink = []
            loss, _ = batch_loss(model, batch, device)  # fp32: the run's epochs call no autocast here
            (loss / terms).backward()
            for name, (module, side) in attention.items():
                if not module.weights_sink:
                    raise RuntimeError(f"attention module {name} put no weights in its weights_sink")
                for weights in module.weights_sink:
                    entropy, saturated, rows = attention_stats(weights, ids[side][1])
                    stats[name][0] += entropy
                    stats[name][1] += saturated
                    stats[name][2] += rows
                module.weights_sink = None
        embedding_params = {id(layer.embedding.weight) for _, layer in inputs.values()}
        grad_sq = {"embedding": 0.0, "other": 0.0}
        for p in params:
            if p.grad is not None:
                grad_sq["embedding" if id(p) in embedding_params else "other"] += float(p.grad.double().square().sum())
    finally:
        for module, _ in attention.values():
            module.weights_sink = None
        for p, grad in zip(params, held):
            p.grad = grad
    row = {}
    for side, (_, layer) in inputs.items():
        row[f"sigma_{side}"] = float(layer.embedding.weight.detach().double().std())
    for side, (x, p) in norms.items():
        row[f"input_ratio_{side}"] = math.sqrt(x / p) if p > 0 else math.nan
    for name, (entropy, _, rows) in stats.items():
        row[f"entropy_{name}"] = entropy / rows if rows else math.nan
    for name, (_, saturated, rows) in stats.items():
        row[f"saturation_{name}"] = saturated / rows if rows else math.nan
    row["grad_norm_embedding"] = math.sqrt(grad_sq["embedding"])
    row["grad_norm_other"] = math.sqrt(grad_sq["other"])
    return row
