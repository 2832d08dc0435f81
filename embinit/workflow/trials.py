"""Each registry entry a config uses, called once on a small input as a run starts (the Snakefile's onstart, before
any job): a wrong signature, type or shape in an extension then stops the run naming its file and function, not a
training job hours later."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import torch

from embinit.workflow.config import ConfigError, initializer_setting, missing_setting
from embinit.layers.initializers import INITIALIZERS, initialize, reads_pretrained
from embinit.layers.missing import MISSING_POLICIES, fill_missing
from embinit.models.config import ModelConfig
from embinit.models.position import POSITION_ENCODINGS
from embinit.workflow.outputs import variant_settings
from embinit.registry import BATCHINGS

SHAPE = (9, 8)  # N x D of the trial layers: D divisible by the trial's 2 heads, even for rotary


class TrialError(ValueError):
    """A registry entry that fails on a small input; the message names its file, function and what was wrong."""


def _where(kind: str, name: str, fn) -> str:
    """e.g. "initializer 'Bad' (/home/me/ext.py, line 7: bad)": the file and function to fix."""
    target = inspect.unwrap(fn)
    try:
        path, line = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
    except (OSError, TypeError):
        path, line = "?", "?"
    return f"{kind} {name!r} ({path}, line {line}: {target.__qualname__})"


def _called(kind: str, name: str, fn, call: str, thunk):
    """thunk() or a TrialError saying which entry failed, called how, with what."""
    try:
        return thunk()
    except Exception as error:
        raise TrialError(f"{_where(kind, name, fn)}: {call} raised {type(error).__name__}: {error}") from None


def _expect(kind: str, name: str, fn, call: str, value, shape: tuple, what: str = "a numpy array") -> None:
    got = getattr(value, "shape", None)
    if got is None or tuple(got) != tuple(shape):
        shown = type(value).__name__ if got is None else f"shape {tuple(got)}"
        raise TrialError(f"{_where(kind, name, fn)}: {call} returned {shown}; expected {what} of shape {shape}")


def try_initializer(name: str, params: dict) -> None:
    """`name` on a random pre-trained N x D matrix (or none, for one that ignores it) must return N x D floats."""
    fn = INITIALIZERS[name]
    pretrained = np.random.default_rng(0).normal(size=SHAPE).astype(np.float32) if reads_pretrained(name) else None
    call = f"initializer(pretrained, {SHAPE}, rng, **{params})"
    layer = _called("initializer", name, fn, call, lambda: initialize(name, pretrained, SHAPE, 0, params))
    _expect("initializer", name, fn, call, layer, SHAPE)
    if not np.issubdtype(layer.dtype, np.floating) or not np.isfinite(layer).all():
        raise TrialError(
            f"{_where('initializer', name, fn)}: {call} returned {layer.dtype} values that are not all finite floats"
        )


def try_missing_policy(name: str, params: dict) -> None:
    """`name` fills the 3 rows a small source lacks (one of them a special token) through fill_missing's checks; a
    source it reads besides (`focus`'s auxiliary space) gives random rows, one of the two missing words lacking."""
    tokens = ["<pad>", "<unk>", "the", "cat", "sat", "on", "a", "mat", "dog"]
    vocab = pd.DataFrame({"token": tokens, "special": [True, True] + [False] * 7})
    matched = np.array([True, False, True, True, True, True, True, False, False])
    matrix = np.where(matched[:, None], np.random.default_rng(0).normal(size=SHAPE), 0.0)
    other = (np.random.default_rng(1).normal(size=(len(tokens), 4)), matched | (np.arange(len(tokens)) == 7))
    call = f"missing-row policy(ctx, **{params}) on {int((~matched).sum())} missing rows"
    _called(
        "missing-row policy",
        name,
        MISSING_POLICIES[name],
        call,
        lambda: fill_missing(vocab, matrix, matched, name, 0, params, lambda source: other),
    )


def try_position_encoding(name: str, model: dict) -> None:
    """`name`'s hooks keep their inputs' shapes, and its bias is None or (heads, queries, keys), on both stacks."""
    cls, dim, heads, length = POSITION_ENCODINGS.lookup(name), SHAPE[1], 2, 5
    config = ModelConfig(heads=heads, ffn_dim=16, layers=1, pos_encoding=name, pos_base=model["pos_base"], max_len=16)
    for causal in (False, True):
        encoding = _called(
            "position encoding",
            name,
            cls,
            f"{cls.__name__}({dim}, config, causal={causal})",
            lambda: cls(dim, config, causal),
        )
        x, t = torch.zeros(2, length, dim), torch.zeros(2, heads, length, dim // heads)
        for call, thunk, shape in (
            (f"embed(x of shape {tuple(x.shape)})", lambda: encoding.embed(x), tuple(x.shape)),
            (f"rotate(t of shape {tuple(t.shape)})", lambda: encoding.rotate(t), tuple(t.shape)),
        ):
            _expect(
                "position encoding",
                name,
                cls,
                call,
                _called("position encoding", name, cls, call, thunk),
                shape,
                "a tensor",
            )
        call = f"bias(0, {length}, {length})"
        bias = _called("position encoding", name, cls, call, lambda: encoding.bias(0, length, length))
        if bias is not None:
            _expect("position encoding", name, cls, call, bias, (heads, length, length), "None or a tensor")


def try_batching(name: str, bucket_width: int) -> None:
    """`name` over 9 (source, target) lengths in batches of 4: an epoch of as many batches as its len() says, each of
    indices of those examples."""
    fn, lengths, size = BATCHINGS.lookup(name), np.arange(18).reshape(9, 2) % 7 + 3, 4
    call = f"batching(lengths of shape {lengths.shape}, {size}, {bucket_width}, generator)"
    sampler = _called("batching", name, fn, call, lambda: fn(lengths, size, bucket_width, torch.Generator()))
    batches = _called("batching", name, fn, f"an epoch of {call}", lambda: [np.asarray(b) for b in sampler])
    epoch = _called("batching", name, fn, f"len() of {call}", lambda: len(sampler))
    indices = all(b.dtype.kind in "iu" and ((b >= 0) & (b < len(lengths))).all() for b in batches)
    if len(batches) != epoch or not indices:
        raise TrialError(
            f"{_where('batching', name, fn)}: {call} gave {len(batches)} batches, len() {epoch}; expected len() "
            f"batches of integer indices in 0..{len(lengths) - 1}"
        )


def try_entries(config: dict) -> None:
    """Every entry a checked config (embinit.workflow.checks.check) names: its initializers, its variants' position
    encodings and batchings, and its missing-row policy; ConfigError naming the first that fails."""
    try:
        for name in config["initializers"]:
            try_initializer(*initializer_setting(config, name))
        try_missing_policy(*missing_setting(config))
        for name in dict.fromkeys(v["pos_encoding"] for v in config["variants"].values()):
            try_position_encoding(name, config["model"])
        batchings = [variant_settings(config, v, "train")["batching"] for v in config["variants"].values()]
        for name in dict.fromkeys(batchings):
            try_batching(name, config["train"]["bucket_width"])
    except TrialError as e:
        raise ConfigError(f"config names a registry entry that fails on a small input: {e}") from None
