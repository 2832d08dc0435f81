"""A report's code digest, read from the files (embinit.sources) without importing the report modules (matplotlib,
scipy), so that the workflow plans an aggregate built by other report code stale (embinit.records) while it parses."""

from __future__ import annotations

import ast
import hashlib

from embinit.sources import bindings, import_closure, module_file, module_lines

BUILDERS = "embinit.reports.builders"
PACKAGE = "embinit.reports"


def _builder_parts(name: str) -> tuple[list[str], set[str]]:
    """The source of output `name`'s builder and of the helpers of builders.py it calls, and the report modules they
    name (`tables.table3`, an imported function of embinit.reports.runs)."""
    bound, lines = bindings(BUILDERS), module_lines(BUILDERS)
    sources, modules, todo, seen = [], set(), [name], set()
    while todo:
        if (current := todo.pop()) in seen:
            continue
        seen.add(current)
        node = bound[current]
        sources.append("".join(lines[node.lineno - 1 : node.end_lineno]))
        for used in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}):  # one order in every process
            statement = bound.get(used)
            if isinstance(statement, ast.FunctionDef):
                todo.append(used)
            elif isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith(PACKAGE):
                submodule = f"{statement.module}.{used}"
                modules.add(submodule if module_file(submodule) else statement.module)
    return sources, modules


def report_modules(name: str) -> list[str]:
    """The embinit.reports modules output `name`'s builder runs, followed through their imports within
    embinit.reports (code elsewhere in embinit, such as an initializer's display name, is not followed)."""
    return import_closure(_builder_parts(name)[1], PACKAGE)


def report_code_digest(name: str) -> str:
    """Short sha256 (16 hex digits) of output `name`'s builder, its helpers and its report modules: a table built by
    other code is stale, and an edit to another output's builder or modules stales none of this one's."""
    sources, named = _builder_parts(name)
    text = "".join(sources) + "".join("".join(module_lines(m)) for m in import_closure(named, PACKAGE))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
