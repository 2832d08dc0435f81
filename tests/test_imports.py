"""embinit's imports flow one way: each module imports only its own stage or a lower one, with no circle."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "embinit"

# Stage of each module or package (a package covers its submodules); an import may go to the same or a lower stage.
STAGES = {
    "embinit": 0,
    "embinit.io": 0,
    "embinit.interrupt": 0,
    "embinit.identity": 0,
    "embinit.registry": 0,
    "embinit.data": 1,
    "embinit.layers": 2,
    "embinit.models": 3,
    "embinit.training": 4,
    "embinit.workflow": 5,
    "embinit.reports": 6,
}


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_of(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def stage_of(module: str) -> int:
    """The stage of the longest entry of STAGES that is `module` or a package holding it."""
    holders = [name for name in STAGES if module == name or module.startswith(name + ".")]
    return STAGES[max(holders, key=len)]


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(embinit module imported, line, inside a function) for every import statement of `module`."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    in_function = {
        id(node)
        for scope in ast.walk(tree)
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for node in ast.walk(scope)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import submodule` imports the submodule; `from module import name` the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # `import embinit.a.b` of a name inside: its module
                target = target.rpartition(".")[0]
            if target:
                found.append((target, node.lineno, id(node) in in_function))
    return found


GRAPH = {module: sorted({target for target, _, _ in imports(module)} - {module}) for module in MODULES}


def test_every_module_has_a_stage():
    assert all(any(m == n or m.startswith(n + ".") for n in STAGES) for m in MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_to_the_same_stage_or_lower(module):
    upward = [
        f"{module} (stage {stage_of(module)}) line {line} imports {target} (stage {stage_of(target)})"
        for target, line, _ in imports(module)
        if stage_of(target) > stage_of(module)
    ]
    assert not upward


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_function_level_embinit_import(module):
    assert [f"{module} line {line}: {target}" for target, line, inside in imports(module) if inside] == []


def test_no_import_circle():
    """Depth-first search: a module met again while on the current path closes a circle."""
    circles, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(" -> ".join(path[path.index(module) :] + [module]))
            return
        if module in done:
            return
        for target in GRAPH[module]:
            visit(target, path + [module])
        done.add(module)

    for module in GRAPH:
        visit(module, [])
    assert circles == []


def test_report_and_extraction_jobs_start_without_torch():
    """The modules of the report and embedding-extraction jobs import no torch (about 3 s of each job's start): only
    reading a `pytorch_model.bin` does, when it happens."""
    code = "import sys, embinit.reports.builders, embinit.layers.pretrained; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
