"""embinit's modules read from their files, not imported: the workflow digests the training code and fingerprints the
built-in position encodings while it parses, and importing embinit.models imports torch (3 s of every start)."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import linecache
from dataclasses import dataclass
from pathlib import Path

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
IMPORTS = (ast.Import, ast.ImportFrom)


def module_file(name: str) -> Path | None:
    """The file of embinit module `name` (a package's __init__.py), found without importing it or the packages above
    it; None for a name that is no module of embinit."""
    if name != "embinit" and not name.startswith("embinit."):
        return None
    path = Path(__file__).parents[2].joinpath(*name.split("."))
    return next((p for p in (path / "__init__.py", path.with_suffix(".py")) if p.is_file()), None)


def module_lines(name: str) -> list[str]:
    """The lines of module `name` as inspect reads them (linecache, which reads a file again after it changed)."""
    path = str(module_file(name))
    linecache.checkcache(path)
    return linecache.getlines(path)


def module_text(name: str) -> str:
    return "".join(module_lines(name))


@functools.lru_cache(maxsize=256)
def parse(text: str) -> ast.Module:
    """A module's syntax tree, parsed once per text (a start digests every output and run it plans); not to be
    changed in place."""
    return ast.parse(text)


def module_tree(name: str) -> ast.Module:
    """Module `name`'s syntax tree, from its file."""
    return parse(module_text(name))


@functools.lru_cache(maxsize=256)
def _assigned(text: str) -> dict[str, list[ast.stmt]]:
    found: dict[str, list[ast.stmt]] = {}
    for statement in parse(text).body:
        if not isinstance(statement, DEFINITIONS + IMPORTS):
            for name in {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}:
                found.setdefault(name, []).append(statement)
    return found


def assignments(name: str) -> dict[str, list[ast.stmt]]:
    """Each name module `name`'s top-level statements other than defs and imports store -> those statements."""
    return _assigned(module_text(name))


def from_imports(name: str) -> list[ast.ImportFrom]:
    """Module `name`'s `from` imports of a named module, anywhere in it."""
    return [n for n in ast.walk(module_tree(name)) if isinstance(n, ast.ImportFrom) and n.module]


def import_closure(names, prefix: str = "embinit") -> list[str]:
    """`names` and every module under `prefix` they import, anywhere in them, followed through the imports of those:
    the code that runs when they run (the training code's digest, a report's)."""
    todo, found = list(names), set()
    while todo:
        if (name := todo.pop()) in found:
            continue
        found.add(name)
        todo += _imports(module_text(name), prefix)
    return sorted(found)


@functools.lru_cache(maxsize=128)
def _imports(text: str, prefix: str) -> tuple[str, ...]:
    """The modules under `prefix` a module's text imports: a `from` import's module and the submodules it names
    (`from embinit.x import submodule`), a plain import's. Parsed once per text: a start digests every output it plans."""
    found = []
    for node in ast.walk(parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix):
            found += [node.module, *(s for a in node.names if module_file(s := f"{node.module}.{a.name}"))]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith(prefix)]
    return tuple(found)


def _bound(statement: ast.stmt) -> list[str]:
    """The names a top-level statement binds; for one other than a def, class or import, every name bound anywhere in
    it (more than the module binds is harmless: such a name's value is read from the imported module, if it has one)."""
    if isinstance(statement, DEFINITIONS):
        return [statement.name]
    if isinstance(statement, ast.Import):
        return [a.asname or a.name.partition(".")[0] for a in statement.names]
    if isinstance(statement, ast.ImportFrom):
        return [a.asname or a.name for a in statement.names]
    nodes = list(ast.walk(statement))[1:]
    stored = [node.id for node in nodes if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)]
    return stored + [name for node in nodes if isinstance(node, DEFINITIONS + IMPORTS) for name in _bound(node)]


def _from_source(statement: ast.stmt) -> bool:
    """A def, a class or an absolute import: a binding read from the source."""
    absolute = isinstance(statement, ast.ImportFrom) and statement.level == 0
    return absolute or isinstance(statement, DEFINITIONS + (ast.Import,))


@functools.cache
def bindings(name: str) -> dict[str, ast.stmt | None]:
    """Each name module `name` binds at its top level -> the def, class or absolute import that binds it, or None
    when anything else does (an assignment, a statement under an `if`, more than one statement). Cached: a module's
    code is fixed once read, as once imported."""
    found: dict[str, list[ast.stmt]] = {}
    for statement in module_tree(name).body:
        for bound in _bound(statement):
            found.setdefault(bound, []).append(statement)
    return {bound: s[0] if len(s) == 1 and _from_source(s[0]) else None for bound, s in found.items()}


@dataclass(frozen=True)
class Source:
    """A top-level function or class of an embinit module, by module and name: a registry's built-in whose module
    imports torch (embinit.models.position) is its Source until that module is imported, so that the workflow reads
    its name and its code (embinit.identity.fingerprints) without importing torch."""

    module: str
    name: str

    def load(self):
        """The function or class itself, its module imported."""
        return getattr(importlib.import_module(self.module), self.name)

    def source(self) -> str:
        """Its code as inspect.getsource gives the loaded object's: from its first decorator to its block's end."""
        node = bindings(self.module)[self.name]
        start = (node.decorator_list[0] if node.decorator_list else node).lineno - 1
        return "".join(inspect.getblock(module_lines(self.module)[start:]))


def registered(module: str, decorator: str) -> dict[str, Source]:
    """{name: Source} of each top-level function or class of `module` under `@decorator("name")`, in the module's
    order: the built-ins its import registers."""
    return {
        call.args[0].value: Source(module, node.name)
        for node in module_tree(module).body
        if isinstance(node, DEFINITIONS)
        for call in node.decorator_list
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == decorator
    }
