"""The user's own Python files, named by config `extensions`, that add to embinit's registries without a fork.

An extension file is imported as a module and may register, as the built-ins do:
- an embedding initializer: `@embinit.layers.initializers.register("Name")` (config `initializers`,
  `initializer_params`, `blocks.*.initializers`, `table3.initializers`);
- a missing-row policy: `@embinit.layers.pretrained.register_missing("name")` (config `embeddings.missing`,
  `embeddings.missing_params`);
- a position encoding: `@embinit.models.position.register("name")` (config `variants.*.pos_encoding`).

`embinit.config.check` loads them first, so their names pass the config checks, and every job that uses a registry
loads them again (Snakemake jobs are separate processes). Paths are relative to the working directory (Snakemake's
`--directory`) or absolute. `fingerprint` hashes the files, so a job can rerun when one changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Iterable, Iterator

MODULE_PREFIX = "embinit_ext_"


class ExtensionError(ValueError):
    """An extension file that cannot be loaded; the message names the file (and the line, for an import error)."""


_LOADED: dict[Path, ModuleType] = {}  # resolved path -> module, in load order
_ORIGIN: dict[tuple[str, str], Path] = {}  # (registry kind, name) -> the extension file that registered it


def _registries() -> dict[str, dict]:
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
    registries = _registries()
    before = {kind: dict(reg) for kind, reg in registries.items()}
    ignore_before = _ignore_pretrained().copy()
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before executing, as an import does (dataclasses, pickling and inspect need it)

    def undo() -> None:
        sys.modules.pop(name, None)
        for kind, reg in registries.items():
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
    for kind, reg in registries.items():
        for key, old in before[kind].items():
            if reg.get(key) is not old:
                owner = _ORIGIN.get((kind, key))
                undo()
                by = f"by extension {owner}" if owner else "built in"
                raise ExtensionError(
                    f"extension {path}: {kind} {key!r} is already registered ({by}); choose another name"
                )
    for kind, reg in registries.items():
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


def fingerprint(paths: Iterable[str | Path]) -> str:
    """Short sha256 (16 hex digits) of the files' bytes, in the order of their paths: a Snakemake `params:`
    value, so a job that depends on the extensions reruns when one changes (not when one only moves)."""
    digest = hashlib.sha256()
    for path in sorted(str(p) for p in paths):
        data = _resolve(path).read_bytes()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Undo, on exit, every extension loaded and every registry entry added inside the block (for tests)."""
    registries = _registries()
    before = {kind: dict(reg) for kind, reg in registries.items()}
    ignore_before = _ignore_pretrained().copy()
    loaded, origin = dict(_LOADED), dict(_ORIGIN)
    try:
        yield
    finally:
        for kind, reg in registries.items():
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
