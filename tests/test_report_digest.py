"""embinit.identity.report_code: an aggregate's sidecar names the report code that built it, read from the files, so that an
edit to the code of a table reruns that table and no other."""

import json
import os
import subprocess
import sys

from conftest import REPO
from embinit.workflow.outputs import OUTPUTS
from embinit.identity import report_code as digest
from embinit.identity.sources import module_lines


def _edited(monkeypatch, module: str, old: str = "", new: str = "# an edit\n"):
    """module_lines as the digest reads it, with `module`'s line holding `old` given `new` (or `new` appended)."""

    def lines(name):
        found = list(module_lines(name))
        if name != module:
            return found
        if not old:
            return [*found, new]
        at = next(i for i, line in enumerate(found) if old in line)
        return [*found[:at], found[at].replace(old, new), *found[at + 1 :]]

    monkeypatch.setattr(digest, "module_lines", lines)


def test_a_builder_is_followed_to_the_report_modules_it_runs_and_theirs():
    assert digest._parts("table3")[1] == ["embinit.reports.format", "embinit.reports.tables"]
    assert digest._parts("tensorboard")[1] == ["embinit.reports.runs", "embinit.reports.tensorboard"]
    compared = digest._parts("paper_comparison")[1]  # comparison imports field and sweeps, field statistics
    modules = ("comparison", "field", "sweeps", "statistics", "tables", "format")
    # `from embinit.reports import field, sweeps` runs the package's __init__ too
    assert compared == sorted(["embinit.reports", *(f"embinit.reports.{m}" for m in modules)])


def test_a_digest_is_the_same_in_every_process():
    """Table 10's builder reaches two helpers: they are digested in one order whatever the process's string hashes
    (a set's order once made its table stale in every new start)."""
    code = (
        "import ast; from embinit.identity import report_code as digest; from embinit.identity.sources import bindings; "
        "b = bindings('embinit.reports.builders'); "
        "print([digest.report_code_digest(n) for n, s in b.items() if isinstance(s, ast.FunctionDef) and n[0] != '_'])"
    )
    shown = [
        subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
            text=True, check=True,
        ).stdout
        for seed in ("1", "2", "3")
    ]  # fmt: skip
    assert shown[0].count("'") == 2 * len(OUTPUTS) and shown[1:] == shown[:2][:1] * 2


def test_an_edit_changes_the_digest_of_the_outputs_whose_code_it_touches_and_no_other(monkeypatch):
    before = {name: digest.report_code_digest(name) for name in ("table1", "table3", "figure1", "paper_comparison")}
    with monkeypatch.context() as m:
        _edited(m, "embinit.reports.tables")  # a module Tables 1 and 3 run, and the comparison through its imports
        after = {name: digest.report_code_digest(name) for name in before}
    assert [name for name in before if after[name] != before[name]] == ["table1", "table3", "paper_comparison"]
    with monkeypatch.context() as m:
        _edited(m, "embinit.reports.builders", old='"Table 1"', new='"Table 1 "')  # Table 1's builder alone
        after = {name: digest.report_code_digest(name) for name in before}
    assert [name for name in before if after[name] != before[name]] == ["table1"]
    assert {name: digest.report_code_digest(name) for name in before} == before  # the files as they are


def test_code_a_report_module_reaches_elsewhere_in_embinit_is_digested_and_code_it_does_not_reach_is_not(monkeypatch):
    """Table 4's analogies are computed by embinit.layers.analogy: an edit there reruns Tables 4 and 10 (and Table 4's
    sensitivity), no other. An initializer's code reaches the tables through its layers' fingerprints, not here: an
    edit to one no report code calls stales no table."""
    names = ("table1", "table3", "table4", "table4_sensitivity", "table10", "figure1", "paper_comparison")
    before = {name: digest.report_code_digest(name) for name in names}
    with monkeypatch.context() as m:
        _edited(m, "embinit.layers.analogy", old="return pd.DataFrame(rows)", new="return pd.DataFrame(rows[::-1])")
        after = {name: digest.report_code_digest(name) for name in names}
    assert [name for name in names if after[name] != before[name]] == ["table4", "table4_sensitivity", "table10"]
    with monkeypatch.context() as m:
        _edited(m, "embinit.layers.initializers", old='raise ValueError(f"Pretrained_Shuffled', new='raise KeyError(f"')
        assert {name: digest.report_code_digest(name) for name in names} == before
    with monkeypatch.context() as m:  # the paper's names of the initializers, which the comparison prints
        _edited(m, "embinit.layers.initializers", old='replace("Pretrained", family)', new='replace("Pretrained", "")')
        after = {name: digest.report_code_digest(name) for name in names}
    assert after["paper_comparison"] != before["paper_comparison"] and after["table1"] == before["table1"]


def test_the_digest_imports_no_report_module():
    """A snakemake start digests each output it plans: matplotlib and scipy stay out of it."""
    code = (
        "import sys; from embinit.identity.report_code import report_code_digest; report_code_digest('figure1'); "
        "print(sorted(m for m in sys.modules if m.startswith(('matplotlib', 'scipy', 'embinit.reports'))))"
    )
    shown = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"


def test_every_committed_output_was_built_by_todays_report_code():
    """A committed table or figure whose sidecar names its report code names today's: an edit to report code is
    committed with the outputs it rebuilds, so a fresh clone plans none of them again."""
    stale = []
    for sidecar in sorted(REPO.glob("results/*/*.spec.json")):
        name, recorded = sidecar.name.split(".")[0], json.loads(sidecar.read_text()).get("report_code")
        if recorded is not None and recorded != digest.report_code_digest(name):
            stale.append(str(sidecar.relative_to(REPO)))
    assert not stale, f"rebuild these from their records: {stale}"
