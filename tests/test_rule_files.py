"""The rule files share one namespace (Snakemake's `include:`), so a name one of them uses unimported would work only
while another file happens to import it. Each file's names must be its own, Snakemake's, or the plan and lookups
rules/common.smk defines for them."""

import ast
import builtins
from pathlib import Path
from types import SimpleNamespace

import pytest
import snakemake.api  # noqa: F401 (first: snakemake.workflow imports it back)
from snakemake import parser, workflow

REPO = Path(__file__).resolve().parent.parent
RULE_FILES = sorted((REPO / "rules").glob("*.smk")) + [REPO / "Snakefile"]
# what Snakemake puts in a Snakefile's namespace beyond its module's names
SNAKEMAKE = {"workflow", "config", "rules", "checkpoints", "scatter", "gather", "storage", "access"}


def compiled(path: Path) -> ast.Module:
    """The Python Snakemake makes of a rule file."""
    source = SimpleNamespace(get_path_or_uri=lambda secret_free: str(path))
    opened = SimpleNamespace(sourcecache=SimpleNamespace(open=lambda p: open(p.get_path_or_uri(True))))
    return ast.parse(parser.parse(source, opened, {})[0])


def bound(tree: ast.Module) -> set[str]:
    """Every name the file binds: imports, definitions, assignments, parameters, loop and comprehension targets."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def used(tree: ast.Module) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


COMMON = bound(compiled(REPO / "rules" / "common.smk"))
GIVEN = set(dir(builtins)) | set(vars(workflow)) | SNAKEMAKE


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_a_rule_file_uses_only_its_own_imports_snakemakes_names_and_common_smks_plan(path):
    tree = compiled(path)
    shared = used(tree) - bound(tree) - GIVEN
    assert shared <= COMMON, f"{path.name} uses {sorted(shared - COMMON)}, neither imported there nor common.smk's"


def test_common_smk_shares_its_plan_and_lookups_not_the_package_names_it_imports():
    """The names the other files take from common.smk are the ones it defines, none of those it imports."""
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(compiled(REPO / "rules" / "common.smk"))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    taken = set().union(*(used(compiled(p)) - bound(compiled(p)) - GIVEN for p in RULE_FILES if p.name != "common.smk"))
    assert taken and not taken & imported, sorted(taken & imported)
