"""Initializers named in the config (`initializer_params.<name>.entry`): one registry entry serves several named
settings without code, each with its own layer, run identity and run-sheet row; the names that were registry
entries' own keep their specs, so the committed records keep their digests."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import yaml
from snakemake.utils import update_config

from conftest import REPO, load_default_config, one_run_config, planned_outputs, result_set_config, run_snakemake
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError, load, validate
from embinit.layers.initializers import fingerprint, initialize, mean_std
from embinit.workflow.runsheet import run_sheet
from embinit.workflow.specs import layer_spec, train_spec
from embinit.workflow.trials import try_entries

BLOCK = "sst2_glove"
SETTINGS = {  # two settings of one entry: at Xavier's sigma and at the pre-trained rows' own (the entry's default)
    "Gaussian_xavier": {"entry": "Pretrained_Gaussian", "scale": "xavier"},
    "Gaussian_own": {"entry": "Pretrained_Gaussian"},
}


def named_config(settings: dict = SETTINGS) -> dict:
    """config.yaml with `settings` defined, in the grid and in BLOCK's list."""
    config = load_default_config()
    update_config(config, {"initializer_params": settings})
    config["initializers"] += list(settings)
    config["blocks"][BLOCK]["initializers"] += list(settings)
    return config


def test_one_entry_serves_two_named_settings_each_with_its_own_layer():
    config = named_config()
    validate(config, REPO / "schemas" / "config.schema.yaml", ["config.yaml"])
    check(config)
    try_entries(config)  # each setting tried as its entry with its parameters
    specs = {name: layer_spec(config, BLOCK, name, 0, "encoder") for name in SETTINGS}
    assert [(s.initializer, s.params) for s in specs.values()] == [
        ("Pretrained_Gaussian", {"scale": "xavier"}),
        ("Pretrained_Gaussian", {}),
    ]
    assert [s.fingerprint for s in specs.values()] == [fingerprint(s.initializer, s.params) for s in specs.values()]
    assert specs["Gaussian_xavier"].digest != specs["Gaussian_own"].digest
    # the layer each spec makes (as the layer job makes it): the same entry at two scales
    shape = (400, 30)
    pretrained = np.random.default_rng(5).normal(0.3, 2.0, size=shape).astype(np.float32)
    sigma = {
        name: mean_std(initialize(s.initializer, pretrained, shape, 0, s.params, "encoder"))[1]
        for name, s in specs.items()
    }
    assert sigma["Gaussian_own"] == pytest.approx(2.0, rel=0.1)
    assert sigma["Gaussian_xavier"] == pytest.approx(mean_std(initialize("Xavier", None, shape, 0))[1], rel=0.05)


def test_a_named_settings_parameters_are_part_of_its_runs_identity_and_run_sheet():
    config = named_config()
    run = train_spec(config, BLOCK, "Gaussian_xavier", 0, "base", False).run
    assert (run["initializer"], run["initializer_entry"], run["initializer_params"]) == (
        "Gaussian_xavier",
        "Pretrained_Gaussian",
        {"scale": "xavier"},
    )
    changed = named_config({**SETTINGS, "Gaussian_xavier": {"entry": "Pretrained_Gaussian", "scale": "pretrained"}})
    for spec in (train_spec, lambda c, *a: layer_spec(c, BLOCK, "Gaussian_xavier", 0, "encoder")):
        assert (
            spec(config, BLOCK, "Gaussian_xavier", 0, "base", False).digest
            != spec(changed, BLOCK, "Gaussian_xavier", 0, "base", False).digest
        )
    sheet = run_sheet(config, {}).set_index(["output", "block", "initializer", "seed"])
    row = sheet.loc[("table1", BLOCK, "Gaussian_xavier", 0)]
    assert (row.initializer_entry, json.loads(row.initializer_params)) == ("Pretrained_Gaussian", {"scale": "xavier"})
    shuffled = sheet.loc[("table1", "sst2_bert", "Pretrained_Shuffled", 0)]
    assert (shuffled.initializer_entry, shuffled.initializer_params) == (
        "Pretrained_Shuffled",
        '{"mode": "rows_columns"}',
    )
    scaled = run_sheet(result_set_config("offline-cpu"), {}).query("output == 'table12' and initializer == 'Xavier_x4'")
    assert set(scaled.initializer_entry) == {"Scaled"} and set(scaled.initializer_params) == {
        '{"base": "Xavier", "k": 4.0}'
    }


@pytest.mark.parametrize("result_set", [None, "first-run", "offline-cpu", "paper-scale-cpu"])
def test_a_name_that_is_its_entrys_own_plans_the_specs_it_planned_before_named_settings(result_set):
    """The run spec of a registry entry's own name holds only what it held before (so the committed records'
    digests still match), and writing its `entry` out changes no spec."""
    config = load_default_config() if result_set is None else result_set_config(result_set)
    for block in config["run_blocks"]:
        for init in config["blocks"][block].get("initializers", config["initializers"]):
            run = train_spec(config, block, init, 0, "base", False).run
            assert set(run) == {"block", "task", "initializer", "seed", "variant"}, (block, init)
    written = copy.deepcopy(config)
    for name in written["initializers"]:
        written["initializer_params"][name] = {"entry": name, **written["initializer_params"].get(name, {})}
    check(written)
    block = config["run_blocks"][0]
    for init in config["initializers"]:
        assert train_spec(written, block, init, 1, "base", False) == train_spec(config, block, init, 1, "base", False)
        assert layer_spec(written, block, init, 1, "encoder") == layer_spec(config, block, init, 1, "encoder")


@pytest.mark.parametrize(
    "settings, expected",
    [
        (
            {"G": {"entry": "Pretrained_Gausian"}},
            "config key initializer_params.G.entry: unknown name 'Pretrained_Gausian'; allowed: Pretrained, ",
        ),
        (
            {"G": {"entry": "Pretrained_Gaussian", "scael": "xavier"}},
            "config key initializer_params.G.scael: unknown name 'scael'; allowed: scale",
        ),
        (
            {"G": {"entry": "Pretrained_Gaussian", "scale": "huge"}},
            "config key initializer_params.G.scale: 'huge' is not one of ['pretrained', 'xavier']",
        ),
        ({"G": {"scale": "xavier"}}, "config key initializer_params.G: unknown name 'G'; allowed: Pretrained, "),
        (
            {"Xavier": {"entry": "Pretrained"}},
            "config key initializer_params.Xavier.entry: 'Xavier' is the registry entry's own name; a setting of "
            "'Pretrained' needs a name of its own",
        ),
    ],
)
def test_an_unknown_entry_or_parameter_is_named_by_its_key(settings, expected):
    config = load_default_config()
    update_config(config, {"initializer_params": settings})
    with pytest.raises(ConfigError) as error:
        check(config)
    assert str(error.value).startswith(expected)


def test_the_grid_and_a_sweep_name_only_defined_settings():
    config = load_default_config()
    config["initializers"].append("Gaussian_xavier")  # not defined
    with pytest.raises(ConfigError, match=r"^config key initializers\[5\]: unknown name 'Gaussian_xavier'; allowed: "):
        check(config)
    config = load_default_config()
    update_config(config, {"initializer_params": {"G": {"entry": 3}}})
    with pytest.raises(ConfigError, match=r"config key initializer_params\.G\.entry: 3 is not of type 'string'"):
        validate(config, REPO / "schemas" / "config.schema.yaml", ["config.yaml"])
    clash = result_set_config("offline-cpu", {"initializer_params": {"Xavier_x4": {"entry": "Xavier"}}})
    with pytest.raises(ConfigError, match="'Xavier_x4', a sweep's initializer, is a registry entry or a name of"):
        check(clash)


def test_the_shipped_named_settings_pass():
    config = load(REPO / "config.yaml")
    settings = {n: p for n, p in config["initializer_params"].items() if "entry" in p}
    assert settings, "config.yaml shows a named setting"
    config["initializers"] += list(settings)
    check(config)
    try_entries(config)


@pytest.mark.slow
def test_a_named_setting_plans_its_entrys_layer_job_in_the_dry_run(tmp_path, tiny_mirror):
    """The dry run plans the named setting's layer and run under its name, its layer spec naming the entry."""
    cfg = one_run_config(
        tmp_path / "c.yaml",
        tiny_mirror,
        initializers=[*load_default_config()["initializers"], "Gaussian_xavier"],
        initializer_params={"Gaussian_xavier": {"entry": "Pretrained_Gaussian", "scale": "xavier"}},
        blocks={"sst2_glove6b50d": {"seeds": 1, "epochs": 1, "batch_size": 8, "initializers": ["Gaussian_xavier"]}},
    )
    run = "results/sst2_glove6b50d/Gaussian_xavier/seed0"
    proc = run_snakemake([f"{run}/base/final.json", "-n", "--configfile", str(cfg)], cwd=tmp_path)
    assert {f"{run}/embedding_encoder.npy", f"{run}/base/final.json"} <= planned_outputs(proc)
    config = load_default_config()
    update_config(config, yaml.safe_load(cfg.read_text()))  # as snakemake merges --configfile
    spec = layer_spec(config, "sst2_glove6b50d", "Gaussian_xavier", 0, "encoder")
    assert (spec.initializer, spec.params) == ("Pretrained_Gaussian", {"scale": "xavier"})
