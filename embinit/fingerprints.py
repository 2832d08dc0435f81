"""Code fingerprints: a job's rerun trigger holds the code of the registry entry it uses, and nothing else.

A bottom module, so the registries' modules (embinit.layers, embinit.models) and the extension loader above them
all import it downward.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import textwrap
from typing import Iterator

MODULE_PREFIX = "embinit_ext_"  # the module name of every extension file embinit.extensions loads
CONSTANTS = (bool, int, float, str, bytes, tuple)  # module-level values whose repr joins a code fingerprint


def _ours(obj) -> bool:
    """Defined in embinit or in an extension file (not numpy, torch or the standard library)."""
    module = getattr(inspect.getmodule(obj), "__name__", "")
    return module == "embinit" or module.startswith(("embinit.", MODULE_PREFIX))


def _named(obj) -> Iterator[tuple[str, object]]:
    """(name, value) of every module-level name `obj`'s source mentions, `module.attribute` resolved."""
    scope = vars(inspect.getmodule(obj))
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(obj)))):
        if isinstance(node, ast.Name) and node.id in scope:
            yield node.id, scope[node.id]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = scope.get(node.value.id)
            if inspect.ismodule(module) and hasattr(module, node.attr):
                yield f"{node.value.id}.{node.attr}", getattr(module, node.attr)


@functools.cache
def _own_part(obj) -> tuple[frozenset, tuple]:
    """`obj`'s own share of a fingerprint (its source, the constants it names) and the functions and classes of ours
    it names; cached per object, as its code is fixed once loaded: a class's getsource parses its whole module, and
    one dry run fingerprints the same few entries for every job (half its time before)."""
    # its qualified name, not its module's: moving a file changes nothing
    parts, named = {(obj.__qualname__, inspect.getsource(obj))}, []
    for name, value in _named(obj):
        if (inspect.isfunction(value) or inspect.isclass(value)) and _ours(value):
            named.append(value)
        elif isinstance(value, CONSTANTS):
            parts.add((f"{obj.__qualname__}:{name}", repr(value)))
    return frozenset(parts), tuple(named)


def code_fingerprint(*objects) -> str:
    """Short sha256 (16 hex digits) of the code `objects` (functions or classes) run: their source and, followed
    transitively, that of every function or class of embinit or an extension file they name, with the constants
    (numbers, strings, tuples) they name. A Snakemake `params:` value: a job reruns when the code of the registry
    entry it uses changes, and not when anything else in the same file does. Mutable module values (registries)
    are left out, so registering another entry changes no fingerprint."""
    seen, parts, todo = set(), set(), list(objects)
    while todo:
        obj = todo.pop()
        if obj in seen:
            continue
        seen.add(obj)
        own, named = _own_part(obj)
        parts |= own
        todo += named
    return hashlib.sha256(repr(sorted(parts)).encode()).hexdigest()[:16]
