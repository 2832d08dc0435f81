"""The user's own Python files, named by config `extensions`, that add to embinit's registries without a fork.

An extension file is imported as a module and may register, as the built-ins do:
- an embedding initializer: `@embinit.layers.initializers.register("Name")` (config `initializers`,
  `initializer_params`, `blocks.*.initializers`, `table3.initializers`);
- a missing-row policy: `@embinit.layers.missing.register_missing("name")` (config `embeddings.missing`,
  `embeddings.missing_params`);
- a position encoding: `@embinit.models.position.register("name")` (config `variants.*.pos_encoding`);
- a batching: `@embinit.training.batching.register_batching("name")` (config `train.batching`,
  `variants.*.train.batching`).

`embinit.workflow.checks.check` loads them first, so their names pass the config checks, and every job that uses a registry
loads them again (Snakemake jobs are separate processes; the rules pass the paths as an `ExtensionFiles`). Paths are
relative to the working directory (Snakemake's `--directory`) or absolute. A job's rerun trigger holds
`embinit.identity.fingerprints.code_fingerprint` of exactly the entry it uses, resolved by registry name: loading another
file, or editing a function no entry in use calls, reruns nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Iterable

from embinit.identity.digests import text_digest
from embinit.identity.fingerprints import MODULE_PREFIX, FingerprintError, code_fingerprint
from embinit.layers.initializers import INITIALIZERS
from embinit.layers.missing import MISSING_POLICIES
from embinit.registry import Registry, Snapshot
from embinit.identity.sources import Source
from embinit.registry import BATCHINGS, POSITION_ENCODINGS


class ExtensionError(ValueError):
    """An extension file that cannot be loaded; the message names the file (and the line, for an import error)."""


_LOADED: dict[Path, ModuleType] = {}  # resolved path -> module, in load order
_ORIGIN: dict[tuple[str, str], Path] = {}  # (registry kind, name) -> the extension file that registered it


def registries() -> dict[str, Registry]:
    """Every registry an extension may add to, by the kind named in errors."""
    return {reg.kind: reg for reg in (INITIALIZERS, MISSING_POLICIES, POSITION_ENCODINGS, BATCHINGS)}


def _snapshot() -> dict[str, Snapshot]:
    return {kind: reg.snapshot() for kind, reg in registries().items()}


def _restore(before: dict[str, Snapshot]) -> None:
    for kind, reg in registries().items():
        reg.restore(before[kind])


def _resolve(path: str | Path) -> Path:
    resolved = Path(path).expanduser().absolute()
    if not resolved.is_file():
        where = "" if Path(path).is_absolute() else f" (relative to the working directory {Path.cwd()})"
        raise ExtensionError(f"extension {path}: no such file{where}")
    return resolved.resolve()


def module_name(path: str | Path) -> str:
    """`embinit_ext_<stem>_<hash8>`: unique per file (the hash is of its resolved path)."""
    resolved = Path(path).absolute().resolve()
    digest = text_digest(str(resolved), 8)
    stem = "".join(c if c.isalnum() else "_" for c in resolved.stem)
    return f"{MODULE_PREFIX}{stem}_{digest}"


def _replaced(old, new) -> bool:
    """`new` is another entry than `old`: a built-in's Source and the class it names are one (a file that imports
    embinit.models.position registers its classes in their Sources' place)."""
    return new is not old and not (isinstance(old, Source) and old.load() is new)


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
    regs, before = registries(), _snapshot()
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before executing, as an import does (dataclasses, pickling and inspect need it)

    def undo() -> None:
        sys.modules.pop(name, None)
        _restore(before)

    try:
        spec.loader.exec_module(module)
    except Exception as error:
        undo()
        line = _error_line(error, resolved)
        where = f"{path}, line {line}" if line else str(path)
        raise ExtensionError(f"extension {where}: {type(error).__name__}: {error}") from error
    for kind, reg in regs.items():
        for key, old in before[kind].entries.items():
            if _replaced(old, reg.get(key)):
                owner = _ORIGIN.get((kind, key))
                undo()
                by = f"by extension {owner}" if owner else "built in"
                raise ExtensionError(
                    f"extension {path}: {kind} {key!r} is already registered ({by}); choose another name"
                )
    for kind, reg in regs.items():
        for key in sorted(reg.keys() - before[kind].entries.keys()):
            try:  # what its code reads must fit its fingerprint, the identity of the jobs that run it
                code_fingerprint(reg[key])
            except FingerprintError as error:
                undo()
                raise ExtensionError(f"extension {path}: {kind} {key!r}: {error}") from None
    for kind, reg in regs.items():
        for key in reg.keys() - before[kind].entries.keys():
            _ORIGIN[(kind, key)] = resolved
    _LOADED[resolved] = module
    return module


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
