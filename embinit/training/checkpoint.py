"""A run's identity and its resumable checkpoint.

A checkpoint after every epoch holds everything the next epoch depends on (weights, optimizer, every RNG,
the batch sampler's generator, the best state so far, the metric rows), so a killed run that restarts
continues exactly where it stopped. It also holds the run's identity (its settings, the training code's
digest and the sha256 of every input file), and a sidecar holds its own sha256: a checkpoint of another
identity, a corrupt one (its sha256 not the sidecar's), or a finished one is discarded and the run trains
from scratch, so a rerun after any change gives what a fresh run gives.
Only a run whose `epochs` grew, with everything else identical, continues its finished checkpoint.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from embinit.io import atomic_path, write_text_atomic
from embinit.identity.digests import sha256_of
from embinit.identity.training_code import code_digest
from embinit.training.spec import RunFiles, RunSpec
from embinit.training.stopping import held

log = logging.getLogger(__name__)


def setup_of(spec: RunSpec) -> dict:
    """The settings a checkpoint must agree with: the spec's identity but epochs, which a resumed run may raise (where
    the run runs is no part of the spec: embinit.training.placement)."""
    setup = {k: v for k, v in spec.identity().items() if k != "epochs"}
    return json.loads(json.dumps(setup, sort_keys=True))


def identity_of(spec: RunSpec, files: RunFiles) -> dict:
    """What makes two runs the same run: the settings, the training code and the content of every input."""
    return {
        "setup": {**setup_of(spec), "code": code_digest()},
        "inputs": {role: sha256_of(path) for role, path in files.by_role().items()},
    }


def identity_differences(old: dict, new: dict) -> list[str]:
    """Names of the settings and input files in which two identities differ."""
    differ = [f"setting {k}" for k in sorted(new["setup"]) if old.get("setup", {}).get(k) != new["setup"][k]]
    return differ + [f"input {k}" for k in sorted(new["inputs"]) if old.get("inputs", {}).get(k) != new["inputs"][k]]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state(device: torch.device) -> dict:
    """Every RNG's state as tensors and plain values, so the checkpoint loads with weights_only=True: each
    visible GPU's by index, and which of them the run used (`device`)."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "cuda_device": device.index if device.type == "cuda" else None,
    }


def set_rng_state(state: dict, device: torch.device) -> None:
    """Put every RNG back: the GPUs' by index, those of GPUs no longer visible left out with one warning, and
    the run's own GPU stream onto the GPU it runs on now (another slot, or fewer GPUs, than when it was saved)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    saved = state["cuda"] or []
    present = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for index, device_state in enumerate(saved[:present]):
        torch.cuda.set_rng_state(device_state, index)
    if len(saved) > present:
        log.warning(
            "the checkpoint holds the RNG states of %d CUDA devices, %d are visible: restored %s, left out %s",
            len(saved),
            present,
            f"cuda:0 to cuda:{present - 1}" if present else "none",
            f"cuda:{present} to cuda:{len(saved) - 1}",
        )
    ran_on = state.get("cuda_device")
    if device.type == "cuda" and ran_on is not None and ran_on < len(saved):
        torch.cuda.set_rng_state(saved[ran_on], device)


def snapshot(
    identity: dict,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    best_model: dict | None,
    rows: list[dict],
    rng: dict | None = None,
) -> dict:
    """The checkpoint after `epoch` (unfinished): everything the next epoch depends on; `rng`: the RNG states the
    run's next epoch draws from, when they are not the process's (`rng_state`)."""
    return {
        "identity": identity,
        "epoch": epoch,
        "finished": False,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "sampler": generator.get_state(),
        "rng": rng or rng_state(next(model.parameters()).device),
        "best_model": best_model,
        "rows": rows,
    }


def expected_size(model: nn.Module) -> int:
    """About the bytes of a checkpoint of `model` (`snapshot`), a little over: its state twice (now, and the best so
    far), Adam's state of each trainable parameter (two moments and a step), 512 B of zip entry per tensor, and 64 KiB
    for the rest (RNG states, sampler, rows: about 30 KiB)."""
    state = list(model.state_dict().values())
    trained = [p for p in model.parameters() if p.requires_grad]
    data = 2 * sum(t.numel() * t.element_size() for t in state) + sum(2 * p.numel() * p.element_size() for p in trained)
    return data + 512 * (2 * len(state) + 3 * len(trained)) + (64 << 10)


def restore(checkpoint: dict, model: nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> None:
    """Put the model, optimizer, sampler generator and every RNG back where `snapshot` found them."""
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    generator.set_state(checkpoint["sampler"])
    set_rng_state(checkpoint["rng"], next(model.parameters()).device)


def digest_path(path: Path) -> Path:
    """The checkpoint's sha256 sidecar, in `sha256sum` format (torch.load does not check the zip's CRCs)."""
    return path.with_name(path.name + ".sha256")


def resumable_checkpoint(path: Path, identity: dict, epochs: int, name: str) -> dict | None:
    """The checkpoint to continue from, or None to train from scratch.

    A checkpoint is a cache: one whose sha256 does not match its sidecar (or has none), that is unreadable,
    belongs to other settings or inputs, is finished at `epochs` or beyond (a forced rerun), or has more
    epochs than asked is deleted with one log line saying why. One of the same run with fewer epochs (killed,
    or `epochs` grew) is continued.
    """
    if not path.exists():
        digest_path(path).unlink(missing_ok=True)
        return None
    try:
        verify_digest(path)
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # flipped bytes, truncated, garbage, or a pickle of more than tensors and values
        log.warning(
            "discarding %s: it is unreadable (%s: %s); run %s trains from scratch",
            path,
            type(error).__name__,
            str(error).splitlines()[0] if str(error) else "",
            name,
        )
        discard(path)
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
    discard(path)
    return None


class DigestMismatch(Exception):
    """A checkpoint that is not the file its sidecar vouches for."""


def verify_digest(path: Path) -> None:
    """Raise DigestMismatch unless `path` has the sha256 its sidecar records (a kill between the two writes
    leaves a new checkpoint beside the old sidecar: it fails here, never passes)."""
    sidecar = digest_path(path)
    if not sidecar.exists():
        raise DigestMismatch(f"{sidecar.name} is missing, so its content cannot be verified")
    expected = sidecar.read_text(encoding="utf-8").split(maxsplit=1)[0]
    actual = sha256_of(path)
    if actual != expected:
        raise DigestMismatch(f"its sha256 {actual} differs from {expected} in {sidecar.name} (corrupt or cut short)")


def discard(path: Path) -> None:
    """Delete a checkpoint with its sidecar: neither is of use without the other."""
    path.unlink()
    digest_path(path).unlink(missing_ok=True)


def save_checkpoint(path: Path, checkpoint: dict) -> None:
    """Write the checkpoint, then its sha256 sidecar, each whole or not at all; a SIGTERM meanwhile waits for both."""
    with held():
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)
            digest = sha256_of(tmp)
        write_text_atomic(digest_path(path), f"{digest}  {path.name}\n")
