"""Faults in what a user feeds the workflow, end to end: a corrupt or misaligned corpus fails its prepare job
naming the files (a malformed row: its line; a dropped empty sentence is named in the log); a bad config file or value fails `snakemake -n` before any job, in a few lines naming the
file or key (docs/reliability.md lists them).
"""

import gzip

import pandas as pd
import pytest

from conftest import EN, REPO, TINY_REMOTES, run_snakemake, write_config, write_gz_lines, write_iwslt

pytestmark = pytest.mark.slow

MULTI30K = "multi30k/task1/raw"


def _prepare(tmp_path, mirror, task, fails=True):
    """Run prepare_<task> on a tiny mirror (its files have other hashes than the real ones); return its output."""
    remotes = {rel: {"sha256": None} for rel in TINY_REMOTES if rel.startswith(("multi30k", "glue"))}
    cfg = write_config(tmp_path / "c.yaml", {"mirror": str(mirror), "remotes": remotes})
    work = tmp_path / "work"
    work.mkdir()
    target = f"data/prepared/{task}/train.parquet"
    proc = run_snakemake([target, "--cores", "2", "--configfile", str(cfg)], cwd=work, check=False)
    assert (proc.returncode != 0) == fails, proc.stderr[-3000:]
    if fails:
        assert not (work / "data/prepared" / task).exists() or not any((work / "data/prepared" / task).iterdir())
    return proc.stdout + proc.stderr


def test_truncated_gzip_fails_prepare_naming_it(tmp_path, tiny_mirror):
    path = tiny_mirror / MULTI30K / "train.de.gz"
    path.write_bytes(path.read_bytes()[:-12])
    out = _prepare(tmp_path, tiny_mirror, "multi30k")
    assert f"DataError: data/raw/{MULTI30K}/train.de.gz: truncated or corrupt gzip file" in out


def test_misaligned_corpus_fails_prepare_naming_both_files_and_counts(tmp_path, tiny_mirror):
    write_gz_lines(tiny_mirror / MULTI30K / "val.en.gz", [EN[0], EN[2]])  # EN[1] deleted; val.de.gz has DE[:3]
    assert len(gzip.decompress((tiny_mirror / MULTI30K / "val.de.gz").read_bytes()).splitlines()) == 3
    out = _prepare(tmp_path, tiny_mirror, "multi30k")
    assert (
        f"DataError: parallel files differ in length: data/raw/{MULTI30K}/val.de.gz has 3 lines, "
        f"data/raw/{MULTI30K}/val.en.gz has 2"
    ) in out


def test_sst2_extra_column_fails_prepare_naming_file_and_line(tmp_path, tiny_mirror):
    dev = tiny_mirror / "glue/SST-2/dev.tsv"
    lines = dev.read_text().splitlines()
    dev.write_text("\n".join([*lines[:2], lines[2] + "\tstray", *lines[3:]]) + "\n")
    out = _prepare(tmp_path, tiny_mirror, "sst2")
    assert (
        "DataError: data/raw/glue/SST-2/dev.tsv:3: 3 tab-separated field(s) where the header has 2 (sentence, label); "
        "a tab inside a sentence, or a column too many or too few"
    ) in out


def test_iwslt_prepare_reads_six_test_sets_and_keeps_an_empty_segment_as_hf_does(tmp_path):
    """The workflow hands prepare a role's list of files and the task's drop_empty (false: HF keeps empty pairs)."""
    mirror = tmp_path / "mirror"
    write_iwslt(mirror)
    tst2012_en = mirror / "iwslt2017/de-en/IWSLT17.TED.tst2012.de-en.en.xml"
    lines = tst2012_en.read_text().splitlines()
    assert lines[9] == '<seg id="1"> sentence tst2012 1 </seg>'
    tst2012_en.write_text("\n".join([*lines[:9], '<seg id="1">  </seg>', *lines[10:]]) + "\n")
    _prepare(tmp_path, mirror, "iwslt2017", fails=False)
    test = pd.read_parquet(tmp_path / "work/data/prepared/iwslt2017/test.parquet")
    expected = [f"sentence tst{y} {i}" if (y, i) != (2012, 1) else "" for y in range(2010, 2016) for i in (1, 2)]
    assert test["tgt"].tolist() == expected


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
        (
            {
                "tasks": {
                    "iwslt2017": {
                        "files": {
                            "test_src": [
                                "iwslt2017/de-en/IWSLT17.TED.tst2010.de-en.de.xml",
                                "iwslt2017/de-en/IWSLT17.TED.tst2016.de-en.de.xml",
                            ]
                        }
                    }
                }
            },
            "config key tasks.iwslt2017.files.test_src[1]: unknown name "
            "'iwslt2017/de-en/IWSLT17.TED.tst2016.de-en.de.xml'",
        ),
        (
            {"tasks": {"iwslt2017": {"files": {"test_tgt": []}}}},
            "config key tasks.iwslt2017.files.test_tgt: [] is not valid under any of the given schemas",
        ),
    ],
)
def test_bad_value_fails_at_load_naming_the_key(tmp_path, overrides, expected):
    out = _dry_run_error(tmp_path, ["--configfile", str(write_config(tmp_path / "bad.yaml", overrides))])
    assert expected in out
