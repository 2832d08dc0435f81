"""The training code's digest, read from the files (embinit.sources), so that the workflow, which plans a record of
other code stale (rules/common.smk), computes it while it parses without importing torch."""

from __future__ import annotations

import ast
import hashlib
import pkgutil

from embinit.sources import module_file, module_lines, module_tree

PACKAGES = ("embinit.training", "embinit.models")


def training_modules() -> list[str]:
    """The code a run's result depends on: every module of embinit.training and embinit.models, and every
    embinit module those import (position tables, vocabulary specials, ...), followed through their imports."""
    names = [*PACKAGES]
    names += [f"{p}.{m.name}" for p in PACKAGES for m in pkgutil.iter_modules([str(module_file(p).parent)])]
    found = set()
    while names:
        name = names.pop()
        if name in found:
            continue
        found.add(name)
        for node in ast.walk(module_tree(name)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embinit"):
                names.append(node.module)
                submodules = [f"{node.module}.{a.name}" for a in node.names]  # `from embinit.x import submodule`
                names += [s for s in submodules if module_file(s)]
            elif isinstance(node, ast.Import):
                names += [alias.name for alias in node.names if alias.name.startswith("embinit")]
    return sorted(found)


def code_digest() -> str:
    """sha256 of the training code (`training_modules`): a checkpoint of other code is stale."""
    return hashlib.sha256("".join("".join(module_lines(m)) for m in training_modules()).encode()).hexdigest()
