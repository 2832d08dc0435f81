"""The user's own Python files, named by config `extensions`, that add to embinit's registries without a fork.

An extension file is imported as a module and may register, as the built-ins do:
- an embedding initializer: `@embinit.layers.initializers.register("Name")` (config `initializers`,
  `initializer_params`, `blocks.*.initializers`, `table3.initializers`);
- a missing-row policy: `@embinit.layers.pretrained.register_missing("name")` (config `embeddings.missing`,
  `embeddings.missing_params`);
- a position encoding: `@embinit.models.position.register("name")` (config `variants.*.pos_encoding`).

`embinit.config.check` loads them first, so their names pass the config checks, and every job that uses a registry
loads them again (Snakemake jobs are separate processes; the rules pass the paths as an `ExtensionFiles`). Paths are
relative to the working directory (Snakemake's `--directory`) or absolute. A job's rerun trigger holds
`code_fingerprint` of exactly the entry it uses, resolved by registry name: loading another file, or editing a
function no entry in use calls, reruns nothing.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import inspect
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Iterable, Iterator

MODULE_PREFIX = "embinit_ext_"


class ExtensionError(ValueError):
    """An extension file that cannot be loaded; the message names the file (and the line, for an import error)."""


_LOADED: dict[Path, ModuleType] = {}  # resolved path -> module, in load order
_ORIGIN: dict[tuple[str, str], Path] = {}  # (registry kind, name) -> the extension file that registered it


def registries() -> dict[str, dict]:
    """Every registry an extension may add to, by the kind named in errors."""
    from embinit.layers import initializers, pretrained
    from embinit.models import position

    return {
        "initializer": initializers.INITIALIZERS,
        "missing-row policy": pretrained.MISSING_POLICIES,
        "position encoding": position.POSITION_ENCODINGS,
    }


def _resolve(path: str | Path) -> Path:
    resolved = Path(path).expanduser().absolute()
    if not resolved.is_file():
        where = "" if Path(path).is_absolute() else f" (relative to the working directory {Path.cwd()})"
        raise ExtensionError(f"extension {path}: no such file{where}")
    return resolved.resolve()


def module_name(path: str | Path) -> str:
    """`embinit_ext_<stem>_<hash8>`: unique per file (the hash is of its resolved path)."""
    resolved = Path(path).absolute().resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:8]
    stem = "".join(c if c.isalnum() else "_" for c in resolved.stem)
    return f"{MODULE_PREFIX}{stem}_{digest}"


def _error_line(error: BaseException, path: Path) -> int | None:
    """The line of `path` where `error` was raised (its innermost frame in that file)."""
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename) == path:
        return error.lineno
    line = None
    for frame, lineno in traceback.walk_tb(error.__traceback__):
        if Path(frame.f_code.co_filename) == path:
            line = lineno
    return line


def _load_one(path: str | Path) -> ModuleType:
    resolved = _resolve(path)
    if resolved in _LOADED:
        return _LOADED[resolved]
    name = module_name(resolved)
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ExtensionError(f"extension {path}: not a Python file (it must end in .py)")
    regs = registries()
    before = {kind: dict(reg) for kind, reg in regs.items()}
    ignore_before = _ignore_pretrained().copy()
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before executing, as an import does (dataclasses, pickling and inspect need it)

    def undo() -> None:
        sys.modules.pop(name, None)
        for kind, reg in regs.items():
            reg.clear()
            reg.update(before[kind])
        _ignore_pretrained().clear()
        _ignore_pretrained().update(ignore_before)

    try:
        spec.loader.exec_module(module)
    except Exception as error:
        undo()
        line = _error_line(error, resolved)
        where = f"{path}, line {line}" if line else str(path)
        raise ExtensionError(f"extension {where}: {type(error).__name__}: {error}") from error
    for kind, reg in regs.items():
        for key, old in before[kind].items():
            if reg.get(key) is not old:
                owner = _ORIGIN.get((kind, key))
                undo()
                by = f"by extension {owner}" if owner else "built in"
                raise ExtensionError(
                    f"extension {path}: {kind} {key!r} is already registered ({by}); choose another name"
                )
    for kind, reg in regs.items():
        for key in reg.keys() - before[kind].keys():
            _ORIGIN[(kind, key)] = resolved
    _LOADED[resolved] = module
    return module


def _ignore_pretrained() -> set[str]:
    from embinit.layers import initializers

    return initializers._IGNORE_PRETRAINED


def load(paths: Iterable[str | Path]) -> list[ModuleType]:
    """Import each extension file once (loading it again is a no-op), so what it registers joins the registries.

    Raises ExtensionError naming the file: a missing file, an exception while importing it (with its line), or
    a name already in a registry (built in or registered by another extension); a failed file leaves the
    registries as they were.
    """
    return [_load_one(p) for p in paths]


@dataclass(frozen=True)
class ExtensionFiles:
    """The config's extension files as a job receives them. An object, because Snakemake leaves objects out of the
    params that trigger reruns (as embinit.training.Placement): what a job uses from these files is in its params
    already, as the `code_fingerprint` of its registry entry."""

    paths: tuple[str, ...] = ()

    def load(self) -> list[ModuleType]:
        return load(self.paths)


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


def code_fingerprint(*objects) -> str:
    """Short sha256 (16 hex digits) of the code `objects` (functions or classes) run: their source and, followed
    transitively, that of every function or class of embinit or an extension file they name, with the constants
    (numbers, strings, tuples) they name. A Snakemake `params:` value: a job reruns when the code of the registry
    entry it uses changes, and not when anything else in the same file does. Mutable module values (registries)
    are left out, so registering another entry changes no fingerprint."""
    seen, parts, todo = set(), set(), list(objects)
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        parts.add((obj.__qualname__, inspect.getsource(obj)))  # not its module's name: moving a file changes nothing
        for name, value in _named(obj):
            if (inspect.isfunction(value) or inspect.isclass(value)) and _ours(value):
                todo.append(value)
            elif isinstance(value, CONSTANTS):
                parts.add((f"{obj.__qualname__}:{name}", repr(value)))
    return hashlib.sha256(repr(sorted(parts)).encode()).hexdigest()[:16]


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Undo, on exit, every extension loaded and every registry entry added inside the block (for tests)."""
    regs = registries()
    before = {kind: dict(reg) for kind, reg in regs.items()}
    ignore_before = _ignore_pretrained().copy()
    loaded, origin = dict(_LOADED), dict(_ORIGIN)
    try:
        yield
    finally:
        for kind, reg in regs.items():
            reg.clear()
            reg.update(before[kind])
        _ignore_pretrained().clear()
        _ignore_pretrained().update(ignore_before)
        for path, module in list(_LOADED.items()):
            if path not in loaded:
                sys.modules.pop(module.__name__, None)
        _LOADED.clear()
        _LOADED.update(loaded)
        _ORIGIN.clear()
        _ORIGIN.update(origin)
