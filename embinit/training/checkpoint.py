"""A run's identity and its resumable checkpoint.

A checkpoint after every epoch holds everything the next epoch depends on (weights, optimizer, every RNG,
the batch sampler's generator, the best state so far, the metric rows), so a killed run that restarts
continues exactly where it stopped. It also holds the run's identity (its settings, the training code's
digest and the sha256 of every input file): a checkpoint of another identity, a corrupt one, or a finished
one is discarded and the run trains from scratch, so a rerun after any change gives what a fresh run gives.
Only a run whose `epochs` grew, with everything else identical, continues its finished checkpoint.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import json
import logging
import pkgutil
import random
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from embinit.io import atomic_path, sha256_of

log = logging.getLogger(__name__)


def setup_of(spec: dict) -> dict:
    """The settings a checkpoint must agree with: all but file paths, epochs and the log (where the run runs
    is no part of the spec: embinit.training.placement)."""
    return json.loads(
        json.dumps(
            {
                "kind": spec["kind"],
                "run": spec["run"],
                "model": spec["model"],
                "variant": spec["variant"],
                "train": spec["train"],
                "batch_size": spec["batch_size"],
                "lr": spec["lr"],
                "seed": spec["seed"],
                "valid_bleu": spec.get("valid_bleu"),
                "num_classes": spec.get("num_classes"),
                "position_code": spec.get("position_code"),  # its position encoding's code, built in or an extension
            },
            sort_keys=True,
        )
    )


def input_files(spec: dict) -> dict[str, str]:
    """Every file the run reads, by role: tokenized splits (data.<split>), embedding layers
    (embeddings.<side>), BLEU references (references.<split>) and the detokenizer."""
    files = {
        f"{group}.{role}": path
        for group in ("data", "embeddings", "references")
        for role, path in (spec.get(group) or {}).items()
        if path
    }
    if spec.get("detokenizer"):
        files["detokenizer"] = spec["detokenizer"]
    return files


def training_modules() -> list:
    """The code a run's result depends on: every module of embinit.training and embinit.models, and every
    embinit module those import (position tables, vocabulary specials, ...), followed through their imports."""
    import embinit.models
    import embinit.training

    packages = (embinit.training, embinit.models)
    names = [p.__name__ for p in packages]
    names += [f"{p.__name__}.{m.name}" for p in packages for m in pkgutil.iter_modules(p.__path__)]
    found = {}
    while names:
        name = names.pop()
        if name in found:
            continue
        found[name] = importlib.import_module(name)
        for node in ast.walk(ast.parse(inspect.getsource(found[name]))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embinit"):
                names.append(node.module)
                module = importlib.import_module(node.module)  # `from embinit.x import submodule`
                names += [
                    f"{node.module}.{a.name}" for a in node.names if inspect.ismodule(getattr(module, a.name, None))
                ]
            elif isinstance(node, ast.Import):
                names += [alias.name for alias in node.names if alias.name.startswith("embinit")]
    return [found[name] for name in sorted(found)]


def code_digest() -> str:
    """sha256 of the training code (`training_modules`): a checkpoint of other code is stale."""
    return hashlib.sha256("".join(inspect.getsource(m) for m in training_modules()).encode()).hexdigest()


def identity_of(spec: dict) -> dict:
    """What makes two runs the same run: the settings, the training code and the content of every input."""
    return {
        "setup": {**setup_of(spec), "code": code_digest()},
        "inputs": {role: sha256_of(path) for role, path in input_files(spec).items()},
    }


def identity_differences(old: dict, new: dict) -> list[str]:
    """Names of the settings and input files in which two identities differ."""
    differ = [f"setting {k}" for k in sorted(new["setup"]) if old.get("setup", {}).get(k) != new["setup"][k]]
    return differ + [f"input {k}" for k in sorted(new["inputs"]) if old.get("inputs", {}).get(k) != new["inputs"][k]]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Every RNG's state as tensors and plain values, so the checkpoint loads with weights_only=True."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def snapshot(
    identity: dict,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    best_model: dict | None,
    rows: list[dict],
) -> dict:
    """The checkpoint after `epoch` (unfinished): everything the next epoch depends on."""
    return {
        "identity": identity,
        "epoch": epoch,
        "finished": False,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "sampler": generator.get_state(),
        "rng": rng_state(),
        "best_model": best_model,
        "rows": rows,
    }


def restore(checkpoint: dict, model: nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> None:
    """Put the model, optimizer, sampler generator and every RNG back where `snapshot` found them."""
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    generator.set_state(checkpoint["sampler"])
    set_rng_state(checkpoint["rng"])


def resumable_checkpoint(path: Path, identity: dict, epochs: int, name: str) -> dict | None:
    """The checkpoint to continue from, or None to train from scratch.

    A checkpoint is a cache: one that is unreadable, belongs to other settings or inputs, is finished at
    `epochs` or beyond (a forced rerun), or has more epochs than asked is deleted with one log line saying
    why. One of the same run with fewer epochs (killed, or `epochs` grew) is continued.
    """
    if not path.exists():
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, garbage, or a pickle of more than tensors and plain values
        log.warning(
            "discarding %s: it is unreadable (%s: %s); run %s trains from scratch",
            path,
            type(error).__name__,
            str(error).splitlines()[0] if str(error) else "",
            name,
        )
        path.unlink()
        return None
    differ = identity_differences(checkpoint.get("identity", {}), identity)
    if differ:
        why = f"it was written for other {', '.join(differ)}"
    elif checkpoint["finished"] and checkpoint["epoch"] >= epochs:
        why = f"the run had finished its {checkpoint['epoch']} epochs, so a rerun trains it again"
    elif checkpoint["epoch"] > epochs:
        why = f"it holds {checkpoint['epoch']} epochs, more than the {epochs} asked for"
    else:
        return checkpoint
    log.info("discarding %s: %s; run %s trains from scratch", path, why, name)
    path.unlink()
    return None


def save_checkpoint(path: Path, checkpoint: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(checkpoint, tmp)
