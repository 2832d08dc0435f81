"""The training code's digest, read from the files (embinit.identity.sources), so that the workflow, which plans a
record of other code stale (rules/common.smk), computes it while it parses without importing torch."""

from __future__ import annotations

import ast
import functools
import pkgutil

from embinit.identity.digests import text_digest
from embinit.identity.sources import import_closure, module_file, module_lines

PACKAGES = ("embinit.training", "embinit.models")


def training_modules() -> list[str]:
    """The code a run's result depends on: every module of embinit.training and embinit.models, and every
    embinit module those import (position tables, vocabulary specials, ...), followed through their imports; not this
    package, which names the code but computes nothing a run learns."""
    modules = [f"{p}.{m.name}" for p in PACKAGES for m in pkgutil.iter_modules([str(module_file(p).parent)])]
    return [m for m in import_closure([*PACKAGES, *modules]) if not m.startswith("embinit.identity")]


@functools.lru_cache(maxsize=256)
def code_only(text: str) -> str:
    """A module's syntax tree without its comments, docstrings or line numbers: what it computes, as text. Cached per
    text: the workflow's start, its checks and each run's record all ask."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def code_digest() -> str:
    """sha256 of the training code (`training_modules`), comments and docstrings aside: a record or checkpoint of
    other code is stale, and an edit to the words alone stales nothing."""
    return text_digest("".join(f"{m}\n{code_only(''.join(module_lines(m)))}\n" for m in training_modules()))
