"""docs/extending.md's extension points, a toy of each added as a user adds it: an initializer, a missing-row fill, a
position encoding and a batching from an extension file, a task from config alone (examples/cola.yaml), a table from
an `Output` entry; each passes the config check and is reached by its name."""

import numpy as np
import pytest
import torch
import yaml

from conftest import REPO, load_default_config, planned_outputs, run_snakemake, write_config
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError
from conftest import isolated
from embinit.identity.fingerprints import code_fingerprint
from embinit.layers.initializers import fingerprint
from embinit.layers.missing import MISSING_POLICIES
from embinit.models.position import POSITION_ENCODINGS
from embinit.workflow.outputs import OUTPUTS, Output, Selection
from embinit.training.spec import RunSpec
from embinit.workflow.runsheet import run_sheet
from embinit.workflow.specs import layer_spec, missing_code, train_spec
from embinit.registry import BATCHINGS
from embinit.training.batching import batch_sampler, sorted_batches
from embinit.workflow.trials import try_entries
from test_config import _config
from test_extensions import EVERY_REGISTRY, write

BLOCK = "cola_toy"
RUN = f"results/{BLOCK}/Ones_Ext/seed0/toy"
# a table as its entry in embinit/workflow/outputs.py declares it: the toy variant's runs of the toy block
TOY_TABLE = Output("toy_table", "Tables", Selection(runs=lambda config: {"blocks": [BLOCK], "variants": ["toy"]}))


def toys(extension) -> dict:
    """A config file's overrides naming every toy: the extension file's four entries, CoLA's task and a block of it
    with no source (nothing to download), and a variant under the toy encoding and batching."""
    return {
        "extensions": [str(extension)],
        "tasks": yaml.safe_load((REPO / "examples" / "cola.yaml").read_text())["tasks"],
        "blocks": {
            BLOCK: {"task": "cola", "sources": {"encoder": None}, "dim": 16, "epochs": 1, "batch_size": 8}
            | {"seeds": 1, "family": "GloVe", "initializers": ["Xavier", "Ones_Ext"]}
        },
        "run_blocks": [BLOCK],
        "initializers": [*load_default_config()["initializers"], "Ones_Ext"],
        "embeddings": {"missing": "ones_ext"},
        "variants": {
            "toy": {"pos_encoding": "none_ext", "embedding_trainable": True, "train": {"batching": "sorted_ext"}}
        },
        "model": {"max_len": 64},
    }


def test_a_toy_of_each_extension_point_passes_the_check_and_is_reached_by_name(tmp_path, monkeypatch):
    config = _config(toys(write(tmp_path / "toys.py", EVERY_REGISTRY)) | {"outputs": ["table1", "toy_table"]})
    with isolated():
        with pytest.raises(ConfigError, match=r"^config key outputs\[1\]: unknown name 'toy_table'; allowed: "):
            check(config)
        monkeypatch.setitem(OUTPUTS, "toy_table", TOY_TABLE)
        check(config)
        try_entries(config)  # each entry called once on a small input
        sheet = run_sheet(config, {})
        toy = sheet[sheet.output == "toy_table"]
        assert sorted(zip(toy.task, toy.initializer, toy.variant, toy.pos_encoding, toy.batching)) == [
            ("cola", init, "toy", "none_ext", "sorted_ext") for init in ("Ones_Ext", "Xavier")
        ]
        assert layer_spec(config, BLOCK, "Ones_Ext", 0, "encoder").fingerprint == fingerprint("Ones_Ext", {})
        assert missing_code(config) == code_fingerprint(MISSING_POLICIES["ones_ext"])
        spec = train_spec(config, BLOCK, "Ones_Ext", 0, "toy", False)
        assert spec.position_code == code_fingerprint(POSITION_ENCODINGS["none_ext"])
        assert spec.train["batching"] == "sorted_ext"
        lengths = np.arange(10).reshape(5, 2) % 3 + 2
        assert all(
            (a == b).all()
            for a, b in zip(batch_sampler("sorted_ext", lengths, 2, 4, torch.Generator()), sorted_batches(lengths, 2))
        )
        config["variants"]["toy"]["train"]["batching"] = "sorted"
        with pytest.raises(ConfigError) as error:
            check(config)
        assert str(error.value) == (
            "config key variants.toy.train.batching: unknown name 'sorted'; allowed: bucketed, random, sorted_ext"
        )


def test_a_custom_batchings_code_is_in_its_runs_identity_and_a_built_in_ones_is_not(tmp_path):
    """The built-ins' code is the training code a run record names, so their runs keep their digests; an extension's
    batching adds `batching_code`, which an edit of it changes."""
    config = _config(toys(tmp_path / "toys.py"))

    def specs(text: str) -> tuple[RunSpec, RunSpec]:
        """The toy variant's spec with its batching's code fingerprint, and the spec of a run under `random`."""
        write(tmp_path / "toys.py", text)
        with isolated():
            check(config)
            toy, base = (train_spec(config, BLOCK, "Ones_Ext", 0, v, False) for v in ("toy", "base"))
            assert toy.batching_code == code_fingerprint(BATCHINGS["sorted_ext"])
            return toy, base

    custom, built_in = specs(EVERY_REGISTRY)
    assert "batching_code" not in built_in.identity() and built_in.train["batching"] == "random"
    edited, same = specs(EVERY_REGISTRY.replace("batch_size)  #", "batch_size)[::-1]  #"))
    assert edited.batching_code != custom.batching_code and edited.digest != custom.digest
    assert same.digest == built_in.digest


@pytest.mark.slow  # one snakemake dry run
def test_a_dry_run_plans_the_toys_jobs_by_name(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", toys(write(tmp_path / "toys.py", EVERY_REGISTRY)) | {"outputs": ["table1"]})
    plan = planned_outputs(run_snakemake(["-n", "--configfile", str(cfg), "--", f"{RUN}/final.json"], cwd=tmp_path))
    layer = f"results/{BLOCK}/Ones_Ext/seed0/embedding_encoder.npy"
    assert {"data/prepared/cola/train.parquet", layer, f"{RUN}/final.json"} <= plan
