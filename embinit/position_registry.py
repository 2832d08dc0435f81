"""The registry of position encodings, apart from their module (embinit.models.position, which registers them and
imports torch): the workflow reads their names and code while it parses, without torch. A built-in is its Source
until that module is imported."""

from __future__ import annotations

from embinit.registry import Registry
from embinit.sources import registered

POSITION_ENCODINGS: Registry = Registry("position encoding")
POSITION_ENCODINGS.update(registered("embinit.models.position", "register"))
