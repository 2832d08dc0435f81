"""The Snakemake layer: config validation before any job, the conda env's pins, checksums through a real run,
shared-data vocabularies."""

import re
import time

import pandas as pd
import pytest
import yaml

from conftest import REPO, SHARED_DATA, needs_shared, run_snakemake, write_config


@pytest.mark.slow
def test_unknown_initializer_fails_at_once_naming_key_and_allowed(tmp_path):
    cfg = write_config(tmp_path / "bad.yaml", {"initializers": ["Foo"]})
    proc = run_snakemake(["vocabularies", "-n", "--configfile", str(cfg)], cwd=tmp_path, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "initializers[0]" in out and "'Foo'" in out and "Pretrained_Xavier" in out


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"blocks": {"sst2_glove": {"task": "sst3"}}}, "blocks.sst2_glove.task: unknown name 'sst3'"),
        ({"blocks": {"sst2_glove": {"sources": {"encoder": "word2vec"}}}}, "blocks.sst2_glove.sources.encoder"),
        ({"mirror": "/no/such/mirror"}, "mirror: directory '/no/such/mirror' does not exist"),
        ({"blocks": {"sst2_glove": {"epochs": "five"}}}, "'five' is not of type 'integer'"),
        (
            {"blocks": {"sst2_glove": {"initializers": ["Xavier", "Pretrained_Gaussian"]}}},
            "blocks.sst2_glove.initializers[1]: block 'sst2_glove' names initializer 'Pretrained_Gaussian', which",
        ),
        ("blocks: {sst2_glove: {epochs: 1.0}}", "blocks.sst2_glove.epochs: 1.0 is not of type 'integer' (write 1"),
        ("model: {dropout: 1.0}", "model.dropout: 1.0 is greater than or equal to the maximum of 1"),
        ("tasks: {sst2: {lr: 1e-3}}", "(YAML 1.1 reads 1e-3 as text, not a number: write 1.0e-3)"),
    ],
)
def test_bad_config_fails_before_any_job(tmp_path, overrides, expected):
    """`overrides`: a config, or the text of a config file (as a user writes it: YAML 1.1 reads 1e-3 as text)."""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(overrides) if isinstance(overrides, str) else write_config(cfg, overrides)
    proc = run_snakemake(["vocabularies", "-n", "--configfile", str(cfg)], cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr


def test_conda_env_pins_exactly_the_requirements():
    """--sdm conda copies envs/pipeline.yaml into .snakemake/conda/, where `-r ../requirements.txt` would not
    resolve, so the env file carries the pins itself."""
    env = yaml.safe_load((REPO / "envs" / "pipeline.yaml").read_text())
    pip = [pins for dep in env["dependencies"] if isinstance(dep, dict) for pins in dep["pip"]]
    lines = [line.strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    requirements = [line for line in lines if line and not line.startswith("#")]
    assert pip == requirements
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==[0-9][^=\s]*", pin) for pin in pip), pip


def test_the_lock_pins_exactly_what_pyproject_declares():
    """requirements.txt (the lock the README installs) = pyproject's dependencies + its extras, each pin inside
    its declared range; no package is pinned that nothing declares (and so nothing uses)."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"]]
    declared += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    lines = [line.strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    pins = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    assert sorted(r.name.lower() for r in declared) == sorted(name.lower() for name in pins)
    assert all(r.specifier.contains(pins[r.name]) for r in declared)


@pytest.mark.slow
def test_mirror_file_with_wrong_checksum_fails_naming_it(tmp_path, tiny_mirror):
    cfg = write_config(tmp_path / "c.yaml", {"mirror": str(tiny_mirror), "run_blocks": ["sst2_glove6b50d"]})
    proc = run_snakemake(
        ["data/raw/glue/SST-2/dev.tsv", "--cores", "1", "--configfile", str(cfg)], cwd=tmp_path, check=False
    )
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "sha256 mismatch for glue/SST-2/dev.tsv" in out
    assert "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0" in out
    assert not (tmp_path / "data/raw/glue/SST-2/dev.tsv").exists()


@pytest.mark.slow
def test_paper_grid_dry_run_lists_every_block_quickly(tmp_path):
    start = time.time()
    proc = run_snakemake(["results/table1.csv", "-n", "--quiet", "rules"], cwd=tmp_path)
    assert time.time() - start < 60
    for rule in ("fetch", "prepare_multi30k", "prepare_iwslt2017", "prepare_mnli", "vocab_sst2", "train"):
        assert rule in proc.stdout, rule


@pytest.mark.slow
@needs_shared
def test_real_vocabularies_from_the_mirror(tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml",
        {"mirror": str(SHARED_DATA), "run_blocks": ["multi30k_glove6b50d", "sst2_glove6b50d", "sst2_minilm"]},
    )
    run_snakemake(["vocabularies", "--cores", "2", "--configfile", str(cfg)], cwd=tmp_path)
    sizes = {
        p.relative_to(tmp_path / "data/vocab").as_posix(): len(pd.read_parquet(p))
        for p in (tmp_path / "data/vocab").rglob("*.parquet")
    }
    assert sizes["multi30k/spacy/decoder.parquet"] == 5893
    assert sizes["multi30k/spacy/encoder.parquet"] == 7853
    assert sizes["sst2/spacy/encoder.parquet"] > 10_000
    minilm = pd.read_parquet(tmp_path / "data/vocab/sst2/minilm/encoder.parquet")
    assert minilm["lm_id"].notna().all() and minilm["lm_id"].max() < 30522
    ids = pd.read_parquet(tmp_path / "data/tokenized/sst2/minilm/train.parquet")
    assert len(ids) == 67349
