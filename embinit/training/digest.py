"""The training code's digest, read from the files (embinit.sources), so that the workflow, which plans a record of
other code stale (rules/common.smk), computes it while it parses without importing torch."""

from __future__ import annotations

import hashlib
import pkgutil

from embinit.sources import import_closure, module_file, module_lines

PACKAGES = ("embinit.training", "embinit.models")


def training_modules() -> list[str]:
    """The code a run's result depends on: every module of embinit.training and embinit.models, and every
    embinit module those import (position tables, vocabulary specials, ...), followed through their imports."""
    modules = [f"{p}.{m.name}" for p in PACKAGES for m in pkgutil.iter_modules([str(module_file(p).parent)])]
    return import_closure([*PACKAGES, *modules])


def code_digest() -> str:
    """sha256 of the training code (`training_modules`): a checkpoint of other code is stale."""
    return hashlib.sha256("".join("".join(module_lines(m)) for m in training_modules()).encode()).hexdigest()
