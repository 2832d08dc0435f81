"""Faults in what a user feeds the workflow, end to end: a corrupt or misaligned corpus fails its prepare job
naming the files; a bad config file or value fails `snakemake -n` before any job, in a few lines naming the
file or key (docs/reliability.md lists them).
"""

import gzip

import pytest

from conftest import EN, REPO, run_snakemake, write_config, write_gz_lines

pytestmark = pytest.mark.slow

MULTI30K = "multi30k/task1/raw"
PREPARED = "data/prepared/multi30k"


def _prepare_multi30k(tmp_path, mirror):
    """Run prepare_multi30k on the tiny mirror (its files have other hashes than the real ones)."""
    files = [f"{MULTI30K}/{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("de", "en")]
    cfg = write_config(tmp_path / "c.yaml", {"mirror": str(mirror), "remotes": {f: {"sha256": None} for f in files}})
    work = tmp_path / "work"
    work.mkdir()
    proc = run_snakemake([f"{PREPARED}/train.parquet", "--cores", "2", "--configfile", str(cfg)], cwd=work, check=False)
    assert proc.returncode != 0
    assert not (work / PREPARED).exists() or not any((work / PREPARED).iterdir())
    return proc.stdout + proc.stderr


def test_truncated_gzip_fails_prepare_naming_it(tmp_path, tiny_mirror):
    path = tiny_mirror / MULTI30K / "train.de.gz"
    path.write_bytes(path.read_bytes()[:-12])
    out = _prepare_multi30k(tmp_path, tiny_mirror)
    assert f"DataError: data/raw/{MULTI30K}/train.de.gz: truncated or corrupt gzip file" in out


def test_misaligned_corpus_fails_prepare_naming_both_files_and_counts(tmp_path, tiny_mirror):
    write_gz_lines(tiny_mirror / MULTI30K / "val.en.gz", [EN[0], EN[2]])  # EN[1] deleted; val.de.gz has DE[:3]
    assert len(gzip.decompress((tiny_mirror / MULTI30K / "val.de.gz").read_bytes()).splitlines()) == 3
    out = _prepare_multi30k(tmp_path, tiny_mirror)
    assert (
        f"DataError: parallel files differ in length: data/raw/{MULTI30K}/val.de.gz has 3 sentences, "
        f"data/raw/{MULTI30K}/val.en.gz has 2"
    ) in out


def _dry_run_error(tmp_path, args):
    """Output of a `snakemake -n` that must fail before any job, in fewer than 30 lines."""
    proc = run_snakemake(["vocabularies", "-n", *args], cwd=tmp_path, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert len(out.splitlines()) < 30, out
    assert not (tmp_path / "data").exists()
    return out


def test_empty_default_config_fails_naming_it(tmp_path):
    (tmp_path / "config.yaml").write_text("# emptied by mistake\n")
    # a Snakefile beside it that includes the real one, so that workflow.basedir/config.yaml is this file
    (tmp_path / "Snakefile").write_text(f'include: "{REPO / "Snakefile"}"\n')
    out = _dry_run_error(tmp_path, ["--snakefile", str(tmp_path / "Snakefile")])  # the last --snakefile wins
    assert f"config file {tmp_path / 'config.yaml'} is empty; it must map config keys to values" in out


def test_schema_violations_are_listed_one_per_line(tmp_path):
    cfg = write_config(
        tmp_path / "bad.yaml", {"blocks": {"sst2_glove": {"epochs": "five"}}, "train": {"bf16": 1}, "tasks": []}
    )
    out = _dry_run_error(tmp_path, ["--configfile", str(cfg)])
    assert f"the config from {cfg}" in out
    for line in (
        "config key blocks.sst2_glove.epochs: 'five' is not of type 'integer'",
        "config key train.bf16: 1 is not of type 'boolean'",
        "config key tasks: [] is not of type 'object'",
    ):
        assert line in out.splitlines()


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            {"model": {"heads_by_dim": {300: 7}}},
            "config key model.heads_by_dim.300: 7 heads do not divide D = 300 of block 'sst2_glove'",
        ),
        (
            {"initializer_params": {"Pretrained_Shuffled": {"mode": "columns"}}},
            "config key initializer_params.Pretrained_Shuffled.mode: 'columns' is not one of ['rows_columns', 'elements']",
        ),
        ({"table4": {"block": "multi30k_glvoe"}}, "config key table4.block: unknown name 'multi30k_glvoe'"),
    ],
)
def test_bad_value_fails_at_load_naming_the_key(tmp_path, overrides, expected):
    out = _dry_run_error(tmp_path, ["--configfile", str(write_config(tmp_path / "bad.yaml", overrides))])
    assert expected in out
