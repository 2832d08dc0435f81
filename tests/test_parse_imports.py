"""Parsing the workflow imports no torch (3 s of every snakemake start, and the tests start many): `--list-rules` and a
dry run read the training code's digest and the built-in position encodings' fingerprints from the files
(embinit.identity.sources), the same as those of the imported code, and a real run tries the registry entries (which imports
torch) at its start, before its first job."""

import ast
import importlib
import inspect
import pkgutil

import pytest

import embinit.models
import embinit.training
from conftest import ONE_RUN, REPO, load_default_config, one_run_config, run_snakemake
from embinit.identity.fingerprints import code_fingerprint
from embinit.layers.initializers import INITIALIZERS
from embinit.layers.missing import MISSING_POLICIES
from embinit.models.position import POSITION_ENCODINGS
from embinit.registry import Registry
from embinit.identity.sources import Source, registered
from embinit.identity.digests import text_digest
from embinit.identity.training_code import code_digest, code_only

EXTENSION = """import numpy as np

from embinit.layers.initializers import register


@register("Ones_Ext", reads_pretrained=False)
def ones(pretrained, shape, rng):
    return np.ones(shape, dtype=np.float32)
"""


def torch_import(stderr: str) -> str:
    """How a process run under `-X importtime` imported torch, 'torch <- ... <- the module it imported first', or ''
    when it did not: importtime writes each module after those it imported, indented one step deeper."""
    rows = [line.split("|")[-1] for line in stderr.splitlines() if line.startswith("import time:")]
    rows = [(len(name) - len(name.lstrip()), name.strip()) for name in rows]
    for i, (depth, name) in enumerate(rows):
        if name == "torch":
            chain = [name]
            for outer, importer in rows[i + 1 :]:
                if outer < depth:
                    chain.append(importer)
                    depth = outer
            return " <- ".join(chain)
    return ""


def snakemake_torch(monkeypatch, args: list[str], cwd) -> str:
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # -X importtime, for the snakemake process
    return torch_import(run_snakemake(args, cwd=cwd).stderr)


@pytest.mark.slow
@pytest.mark.parametrize("result_set", ["default", "offline-cpu"])
def test_listing_the_rules_imports_no_torch(result_set, tmp_path, tiny_mirror, monkeypatch):
    args = ["--list-rules", "--config", f"mirror={tiny_mirror}"]
    if result_set != "default":
        args += ["--configfile", str(REPO / "config" / f"{result_set}.yaml")]
    assert snakemake_torch(monkeypatch, args, tmp_path) == ""


@pytest.mark.slow
def test_a_dry_run_plans_a_run_without_torch(tmp_path, tiny_mirror, monkeypatch):
    """It computes the run's spec (its position encoding's code) and the training code's digest, and loads an
    extension file; a real run tries the entries as it starts (tests/test_faults_records.py)."""
    extension = tmp_path / "ext.py"
    extension.write_text(EXTENSION)
    initializers = [*load_default_config()["initializers"], "Ones_Ext"]
    cfg = one_run_config(tmp_path / "c.yaml", tiny_mirror, extensions=[str(extension)], initializers=initializers)
    args = ["-n", f"{ONE_RUN}/final.json", "--configfile", str(cfg)]
    assert snakemake_torch(monkeypatch, args, tmp_path) == ""


def imported_training_code() -> str:
    """The training code's digest as it was computed before embinit.identity.sources, from the imported modules."""
    names = [p.__name__ for p in (embinit.training, embinit.models)]
    names += [
        f"{p.__name__}.{m.name}" for p in (embinit.training, embinit.models) for m in pkgutil.iter_modules(p.__path__)
    ]
    found = {}
    while names:
        name = names.pop()
        if name in found:
            continue
        found[name] = importlib.import_module(name)
        for node in ast.walk(ast.parse(inspect.getsource(found[name]))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embinit"):
                names.append(node.module)
                module = importlib.import_module(node.module)
                names += [
                    f"{node.module}.{a.name}" for a in node.names if inspect.ismodule(getattr(module, a.name, None))
                ]
            elif isinstance(node, ast.Import):
                names += [alias.name for alias in node.names if alias.name.startswith("embinit")]
    return text_digest(
        "".join(
            f"{n}\n{code_only(inspect.getsource(found[n]))}\n"
            for n in sorted(found)
            if not n.startswith("embinit.identity")
        )
    )


def test_the_training_code_digest_read_from_the_files_is_that_of_the_imported_code():
    assert code_digest() == imported_training_code()


def test_a_fingerprint_read_from_the_files_is_that_of_the_loaded_code():
    """Every built-in entry of every registry, though only the position encodings are read from the files."""
    entries = [*INITIALIZERS.values(), *MISSING_POLICIES.values(), *POSITION_ENCODINGS.values()]
    assert [code_fingerprint(Source(e.__module__, e.__qualname__)) for e in entries] == [
        code_fingerprint(e) for e in entries
    ]


def test_the_position_encodings_read_from_the_files_are_those_their_module_registers():
    built_in = {name: cls for name, cls in POSITION_ENCODINGS.items() if cls.__module__ == "embinit.models.position"}
    sources = registered("embinit.models.position", "register")
    assert {name: source.load() for name, source in sources.items()} == built_in
    registry = Registry("position encoding")
    registry.update(sources)  # as before the module is imported
    assert registry.lookup("rotary") is built_in["rotary"]
