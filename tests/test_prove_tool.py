"""tools/prove_training_code.py finds a record's config and run before it trains anything: a committed record through
config/*.yaml, a record of a results directory anywhere through --configfile (results_dir read from the working
directory), and a record no config holds stops at once, saying so."""

import importlib.util

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("prove_training_code", REPO / "tools" / "prove_training_code.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def test_a_committed_record_is_found_through_its_result_sets_config():
    record = REPO / "results/first-run/sst2_glove6b50d/Xavier/seed0/base/final.json"
    assert tool.locate(record, None) == (
        REPO / "config/first-run.yaml",
        record.parent.relative_to(REPO / "results/first-run"),
    )


def test_a_record_elsewhere_is_found_through_its_configfile(tmp_path, monkeypatch):
    record = tmp_path / "mine/b/Xavier/seed0/base/final.json"
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    (tmp_path / "c.yaml").write_text("results_dir: mine\n")
    monkeypatch.chdir(tmp_path)
    configfile, run = tool.locate(record, tmp_path / "c.yaml")
    assert configfile == tmp_path / "c.yaml" and str(run) == "b/Xavier/seed0/base"
    with pytest.raises(SystemExit, match="not under no config/"):
        tool.locate(record, None)
    assert tool._in(REPO, tmp_path / "c.yaml") == tmp_path / "c.yaml"
