"""Code fingerprints: a job's rerun trigger holds the code of the registry entry it uses, and nothing else.

A bottom module, so the registries' modules (embinit.layers, embinit.models) and the extension loader above them
all import it downward. An entry is fingerprinted as loaded, or, as the Source of a built-in whose module imports
torch, from the files (the same fingerprint: tests/test_parse_imports.py).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import sys
import textwrap
from typing import Iterator

from embinit.identity.digests import text_digest
from embinit.identity.sources import DEFINITIONS, Source, bindings, module_file

MODULE_PREFIX = "embinit_ext_"  # the module name of every extension file embinit.workflow.extensions loads
SCALARS = (bool, int, float, str, bytes)  # module-level values whose repr joins a code fingerprint, with the containers
CONTAINERS = (list, dict, set, frozenset)  # exact types (a Registry, a dict subclass, is left out) and any tuple


_UNBOUND = object()  # a name no module-level value is bound to


def _ours(obj) -> bool:
    """Defined in embinit or in an extension file (not numpy, torch or the standard library)."""
    module = getattr(inspect.getmodule(obj), "__name__", "")
    return module == "embinit" or module.startswith(("embinit.", MODULE_PREFIX))


def _code(value) -> bool:
    """A function or class of ours."""
    return (inspect.isfunction(value) or inspect.isclass(value)) and _ours(value)


def _read(module: str, name: str):
    """What `module`'s top-level `name` holds, read from its file as far as a fingerprint needs: a def or class as its
    Source, an import of ours what it imports, another library's module nothing, and any other value from the
    imported module."""
    if name not in (bound := bindings(module)):
        return _UNBOUND
    statement = bound[name]
    if isinstance(statement, DEFINITIONS):
        return Source(module, name)
    if isinstance(statement, ast.Import):
        alias = next(a for a in statement.names if (a.asname or a.name.partition(".")[0]) == name)
        imported = alias.name if alias.asname else name
        return importlib.import_module(imported) if module_file(imported) else _UNBOUND
    if isinstance(statement, ast.ImportFrom):
        imported = next(a.name for a in statement.names if (a.asname or a.name) == name)
        if module_file(f"{statement.module}.{imported}"):
            return importlib.import_module(f"{statement.module}.{imported}")
        if module_file(statement.module):
            return _read(statement.module, imported)
        return getattr(importlib.import_module(statement.module), imported)
    return getattr(importlib.import_module(module), name, _UNBOUND)


def _value(obj, name: str):
    """What `name` holds in the module of `obj`, a loaded object or a Source; _UNBOUND when nothing."""
    if isinstance(obj, Source):
        return _read(obj.module, name)
    return vars(inspect.getmodule(obj)).get(name, _UNBOUND)


def _named(obj, source: str) -> Iterator[tuple[str, object]]:
    """(name, value) of every module-level name `obj`'s source mentions, `module.attribute` of our modules resolved
    (another library's constants, such as math.pi, are no more ours than its functions)."""
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.Name) and (value := _value(obj, node.id)) is not _UNBOUND:
            yield node.id, value
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = _value(obj, node.value.id)
            if inspect.ismodule(module) and _ours(module) and hasattr(module, node.attr):
                yield f"{node.value.id}.{node.attr}", getattr(module, node.attr)


@functools.cache
def _own_part(obj) -> tuple[frozenset, tuple]:
    """`obj`'s own share of a fingerprint (its source, the constants it names) and the functions and classes of ours
    it names; cached per object, as its code is fixed once loaded: a class's getsource parses its whole module, and
    one dry run fingerprints the same few entries for every job (half its time before)."""
    # its qualified name, not its module's: moving a file changes nothing
    qualname, source = (
        (obj.name, obj.source()) if isinstance(obj, Source) else (obj.__qualname__, inspect.getsource(obj))
    )
    parts, named = {(qualname, source)}, []
    for name, value in _named(obj, source):
        if isinstance(value, Source) or _code(value):
            named.append(value)
        elif isinstance(value, SCALARS + (tuple,)) or type(value) in CONTAINERS:
            held = []  # the code a container names joins only when the container does
            try:
                parts.add((f"{qualname}:{name}", repr(_plain(value, held, _registry_state()))))
                named += held
            except _RegistryState:
                pass
        elif type(value).__module__ == "numpy":  # a numpy scalar or array: its dtype, shape and bytes
            parts.add((f"{qualname}:{name}", _array(value)))
        elif _extension(obj) and not (inspect.ismodule(value) or callable(value)):  # data, not another library's code
            parts.add((f"{qualname}:{name}", _stable_repr(obj, name, value)))
    return frozenset(parts), tuple(named)


def _array(value) -> str:
    """A numpy value as its dtype, shape and a digest of its bytes (an array's repr elides its middle)."""
    data = value.tobytes() if hasattr(value, "tobytes") else repr(value).encode()
    return f"{getattr(value, 'dtype', type(value).__name__)}{getattr(value, 'shape', ())}:{hashlib.sha256(data).hexdigest()}"


def _extension(obj) -> bool:
    """Code of an extension file (a Source is always embinit's own)."""
    return not isinstance(obj, Source) and getattr(inspect.getmodule(obj), "__name__", "").startswith(MODULE_PREFIX)


class FingerprintError(ValueError):
    """A module-level value an extension's code reads that no fingerprint can hold (its repr names an address)."""


def _stable_repr(obj, name: str, value) -> str:
    """Any other value an extension's code reads, by its repr; one whose repr is an address is refused by name."""
    text = repr(value)
    if " at 0x" in text:
        raise FingerprintError(
            f"{inspect.getsourcefile(obj)}: {obj.__qualname__} reads the module-level {name} = {text}, a value no "
            "fingerprint can hold; make it a number, string, container of them or numpy value, or a function of ours"
        )
    return text


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
    if _code(value):
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
    """Short sha256 (16 hex digits) of the code `objects` (functions or classes, or their Source) run: their source
    and, followed transitively, that of every function or class of embinit or an extension file they name, with the
    module-level data they name (numbers, strings, and tuples, lists, dicts and sets with what they hold). A Snakemake
    `params:` value: a job reruns when the code of the registry entry it uses, or a setting it reads, changes, and not
    when anything else in the same file does. Registries and the name sets they fill are left out, so registering
    another entry changes no fingerprint."""
    seen, parts, todo = set(), set(), list(objects)
    while todo:
        obj = todo.pop()
        if obj in seen:
            continue
        seen.add(obj)
        own, named = _own_part(obj)
        parts |= own
        todo += named
    return text_digest(repr(sorted(parts)), 16)
