"""The registries whose built-in entries import torch, apart from their modules: position encodings
(embinit.models.position) and batchings (embinit.training.batching). The workflow reads their names and code while it
parses, without torch; a built-in is its Source until its module is imported and registers it in its place."""

from __future__ import annotations

from embinit.registry import Registry
from embinit.sources import registered

POSITION_ENCODINGS: Registry = Registry("position encoding")
POSITION_ENCODINGS.update(registered("embinit.models.position", "register"))
BATCHINGS: Registry = Registry("batching")
BATCHINGS.update(registered("embinit.training.batching", "register_batching"))
