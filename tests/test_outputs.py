"""The output registry (embinit/workflow/outputs.py): every entry has its builder, its caption and a rule, and nothing else
names an output the registry does not hold."""

import inspect

from conftest import REPO, load_default_config
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError
from embinit.workflow.outputs import OUTPUTS, seeded_tables
from embinit.reports import builders


def test_every_output_has_one_builder_and_one_caption_and_no_builder_is_left_over():
    own = inspect.getmembers(builders, lambda fn: inspect.isfunction(fn) and fn.__module__ == builders.__name__)
    public = {name for name, _ in own if not name.startswith("_")}
    assert public == set(OUTPUTS)
    assert all((REPO / "report" / f"{name}.rst").is_file() for name in OUTPUTS)


def test_seeded_tables_are_the_paper_tables_whose_cells_are_means_over_seeds():
    assert seeded_tables() == [1, 3, 7]


def test_the_schema_leaves_output_names_to_the_registry():
    config = load_default_config()
    config["outputs"] = ["table1", "table99"]
    try:
        check(config)
    except ConfigError as e:
        assert str(e).startswith("config key outputs[1]: unknown name 'table99'; allowed: ")
    else:
        raise AssertionError("an unknown output passed the check")
