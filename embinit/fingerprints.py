"""Code fingerprints: a job's rerun trigger holds the code of the registry entry it uses, and nothing else.

A bottom module, so the registries' modules (embinit.layers, embinit.models) and the extension loader above them
all import it downward.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import sys
import textwrap
from typing import Iterator

MODULE_PREFIX = "embinit_ext_"  # the module name of every extension file embinit.extensions loads
SCALARS = (bool, int, float, str, bytes)  # module-level values whose repr joins a code fingerprint, with the containers
CONTAINERS = (list, dict, set, frozenset)  # exact types (a Registry, a dict subclass, is left out) and any tuple


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
        elif isinstance(value, SCALARS + (tuple,)) or type(value) in CONTAINERS:
            held = []  # the code a container names joins only when the container does
            try:
                parts.add((f"{obj.__qualname__}:{name}", repr(_plain(value, held, _registry_state()))))
                named += held
            except _RegistryState:
                pass
    return frozenset(parts), tuple(named)


class _RegistryState(Exception):
    """A value holds what registering entries fills in: not code a job runs."""


def _registry_state() -> set[int]:
    """The ids of the name sets registries fill as entries register (a Registry's `flags`), found in our loaded
    modules: a module-level set such as initializers' `_IGNORE_PRETRAINED` is one, and registering another entry must
    change no fingerprint."""
    found = set()
    for name, module in list(sys.modules.items()):
        if name.startswith(("embinit", MODULE_PREFIX)):
            for value in vars(module).values():
                flags = getattr(value, "flags", None) if isinstance(value, dict) else None
                found |= {id(names) for names in flags.values()} if isinstance(flags, dict) else set()
    return found


def _plain(value, named: list, registry: set[int]):
    """`value` as data whose repr is the same in every process: scalars and tuples of them as they are, containers item
    by item (a set sorted), our functions and classes by name (their code joins `named`), any other object by its repr
    when that holds no address, else by its type. A dict or list the code reads is state it depends on."""
    if id(value) in registry:
        raise _RegistryState
    if value is None or isinstance(value, SCALARS):
        return value
    if (inspect.isfunction(value) or inspect.isclass(value)) and _ours(value):
        named.append(value)
        return f"<{value.__qualname__}>"
    if isinstance(value, tuple):
        items = tuple(_plain(v, named, registry) for v in value)
        return value if all(a is b for a, b in zip(items, value)) else items
    if type(value) is list:
        return [_plain(v, named, registry) for v in value]
    if type(value) is dict:
        return {repr(_plain(k, named, registry)): _plain(v, named, registry) for k, v in value.items()}
    if type(value) in (set, frozenset):
        return (type(value).__name__, sorted(repr(_plain(v, named, registry)) for v in value))
    text = repr(value)
    return text if " at 0x" not in text else f"<{type(value).__qualname__}>"


def code_fingerprint(*objects) -> str:
    """Short sha256 (16 hex digits) of the code `objects` (functions or classes) run: their source and, followed
    transitively, that of every function or class of embinit or an extension file they name, with the module-level
    data they name (numbers, strings, and tuples, lists, dicts and sets with what they hold). A Snakemake `params:`
    value: a job reruns when the code of the registry entry it uses, or a setting it reads, changes, and not when
    anything else in the same file does. Registries and the name sets they fill are left out, so registering another
    entry changes no fingerprint."""
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
