"""A report's code digest, read from the files (embinit.identity.sources) without importing the report modules (matplotlib,
scipy), so that the workflow plans an aggregate built by other report code stale (embinit.identity.records) while it parses."""

from __future__ import annotations

import ast
import functools

from embinit.identity.digests import text_digest
from embinit.identity.sources import (
    DEFINITIONS,
    assignments,
    bindings,
    from_imports,
    import_closure,
    module_file,
    module_lines,
)

BUILDERS = "embinit.reports.builders"
PACKAGE = "embinit.reports"


def report_code_digest(name: str) -> str:
    """Short sha256 (16 hex digits) of output `name`'s builder, its helpers, its report modules and the definitions
    elsewhere in embinit they reach: a table built by other code is stale, and an edit to another output's code, or to
    a definition none of its code reaches (an initializer: the layers' fingerprints carry those), stales none of this
    one's."""
    sources, modules = _parts(name)
    text = "".join(sources) + "".join("".join(module_lines(m)) for m in modules)
    return text_digest(text, 16)


def _parts(name: str) -> tuple[list[str], list[str]]:
    """The source of each definition output `name`'s builder reaches outside the report modules (its helpers in
    builders.py, an analogy function of embinit.layers, a constant), and the modules it runs whole: the report modules,
    followed through their imports within embinit.reports (imports flow one way: nothing else imports them)."""
    sources, whole, seen = {}, set(), set()
    _walk([(BUILDERS, name)], seen, sources, whole)
    reports = import_closure({m for m in whole if m.startswith(PACKAGE)}, PACKAGE)
    imported = [
        _target(module, alias.asname or alias.name, node)
        for module in reports
        for node in from_imports(module)
        if node.module.startswith("embinit") and not node.module.startswith(PACKAGE)
        for alias in node.names
    ]
    _walk(imported, seen, sources, whole)
    return list(sources.values()), sorted(whole | set(reports))


def _walk(todo: list, seen: set, sources: dict[tuple[str, int], str], whole: set[str]) -> None:
    """Follow each (module, name) through the names its statements use, one order in every process: a definition's
    source joins `sources`, a module imported whole (a report module) joins `whole`."""
    while todo:
        if (key := todo.pop()) is None or key in seen:
            continue
        seen.add(key)
        module, name = key
        if name is None or (module.startswith(PACKAGE) and module != BUILDERS):
            whole.add(module)
            continue
        statements, lines = _statements(module, name), module_lines(module)
        for s in statements:  # a statement binding two names reached (`A, B = ...`) counts once
            sources.setdefault((module, s.lineno), "".join(lines[s.lineno - 1 : s.end_lineno]))
        todo += [_target(module, used) for s in statements for used in _names(s)]


def _statements(module: str, name: str) -> list[ast.stmt]:
    """The top-level statements of `module` that bind `name`: its def or class, or each assignment to it."""
    statement = bindings(module).get(name)
    if isinstance(statement, DEFINITIONS):
        return [statement]
    return assignments(module).get(name, [])


@functools.lru_cache(maxsize=1024)
def _names(statement: ast.stmt) -> tuple[str, ...]:
    """The names a statement uses, in one order in every process (last first: the walk pops them in order)."""
    return tuple(sorted({n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}, reverse=True))


def _target(module: str, used: str, statement: ast.stmt | None = None) -> tuple[str, str | None] | None:
    """What name `used` of `module` refers to within embinit: (a module, None), (a module, a name it binds), or None
    (a builtin, a local, a library's)."""
    statement = statement or bindings(module).get(used, ast.Pass())
    if isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith("embinit"):
        original = next(a.name for a in statement.names if (a.asname or a.name) == used)
        submodule = f"{statement.module}.{original}"
        return (submodule, None) if module_file(submodule) else (statement.module, original)
    if isinstance(statement, ast.Import):
        return None
    return (module, used) if used in bindings(module) else None
