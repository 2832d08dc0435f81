"""Shared fixtures: tiny datasets in the real raw formats, the snakemake runner used by workflow tests, and the
one-run grid built once per session."""

from __future__ import annotations

import atexit
import contextlib
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
import yaml
from job_zygote import JobZygote
from snakemake_zygote import Zygote

from embinit.workflow import extensions

# torch's OpenMP threads sleep rather than spin while they wait (set before torch loads): on 2 cores shared with
# other work, spinning made the toy training runs up to 5x slower (docs/performance.md, "Test tiers"); no result
# depends on it, and the snakemake runs below inherit it
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
needs_shared = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"the data mirror {SHARED_DATA} is absent (it sits beside the repo in CI)"
)

EN = [
    "A man rides a red bike .",
    "Two dogs play in the snow .",
    "A woman reads a book .",
    "A man reads a red book .",
    "Two women ride bikes .",
    "A dog runs in the park .",
]
DE = [
    "Ein Mann fährt ein rotes Fahrrad .",
    "Zwei Hunde spielen im Schnee .",
    "Eine Frau liest ein Buch .",
    "Ein Mann liest ein rotes Buch .",
    "Zwei Frauen fahren Fahrrad .",
    "Ein Hund rennt im Park .",
]


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Undo, on exit, every extension loaded and every registry entry added inside the block ."""
    before, loaded, origin = extensions._snapshot(), dict(extensions._LOADED), dict(extensions._ORIGIN)
    try:
        yield
    finally:
        extensions._restore(before)
        for path, module in list(extensions._LOADED.items()):
            if path not in loaded:
                sys.modules.pop(module.__name__, None)
        extensions._LOADED.clear()
        extensions._LOADED.update(loaded)
        extensions._ORIGIN.clear()
        extensions._ORIGIN.update(origin)


def write_gz_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")


def write_tiny_mirror(root: Path) -> Path:
    """A mirror directory laid out like ../shared/data at `root`, holding tiny Multi30k and SST-2 files."""
    raw = root / "multi30k" / "task1" / "raw"
    for split, n in (("train", 6), ("val", 3), ("test_2016_flickr", 3)):
        write_gz_lines(raw / f"{split}.en.gz", (EN * 2)[:n] if split != "train" else EN * 3)
        write_gz_lines(raw / f"{split}.de.gz", (DE * 2)[:n] if split != "train" else DE * 3)
    sst = [
        ["a gripping , funny film", "1"],
        ["dull and lifeless", "0"],
        ["a funny , warm film", "1"],
        ["lifeless and dull plot", "0"],
    ] * 5
    write_tsv(root / "glue" / "SST-2" / "train.tsv", ["sentence", "label"], sst)
    write_tsv(root / "glue" / "SST-2" / "dev.tsv", ["sentence", "label"], sst[:4])
    return root


@pytest.fixture
def tiny_mirror(tmp_path: Path) -> Path:
    """The tiny mirror of this test alone, which it may change."""
    return write_tiny_mirror(tmp_path / "mirror")


@pytest.fixture(scope="session")
def shared_mirror(tmp_path_factory) -> Path:
    """The tiny mirror, written once per session for tests that only read it (the shared grid reads it)."""
    return write_tiny_mirror(tmp_path_factory.mktemp("shared") / "mirror")


# `remotes` for a config reading the tiny mirror (plus a word2vec file the test writes): its files are not the real
# ones, so they carry no checksum
TINY_REMOTES = {
    rel: {"sha256": None}
    for rel in (
        "glue/SST-2/train.tsv",
        "glue/SST-2/dev.tsv",
        "word2vec/questions-words.txt",
        *[f"multi30k/task1/raw/{s}.{lang}.gz" for s in ("train", "val", "test_2016_flickr") for lang in ("de", "en")],
    )
}


# metrics.parquet columns that depend on the machine, not on what was computed
TIMING = ["train_seconds", "valid_seconds", "tokens_per_second", "mechanism_seconds"]


def fetch(relpath: str, remote: dict, out_path, settings=None) -> str:
    """One remote's file placed at `out_path` as rule fetch places it (embinit.data.fetch.fetch_members)."""
    from embinit.data.fetch import FetchSettings, fetch_members

    return fetch_members({relpath: remote}, {relpath: out_path}, settings or FetchSettings())[0]


def load_default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def result_set_config(result_set: str, overrides: dict | None = None) -> dict:
    """config.yaml with config/<result_set>.yaml (and `overrides`) merged in, as snakemake merges --configfile."""
    from snakemake.utils import update_config  # here, so the cuda tier runs where only torch is (a GPU's image)

    config = load_default_config()
    update_config(config, yaml.safe_load((REPO / "config" / f"{result_set}.yaml").read_text()))
    update_config(config, overrides or {})
    return config


RUNNING: dict[str, pytest.Item] = {}  # "test": the test being set up or run


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Remember the running test before its fixtures start, so run_snakemake can check its tier."""
    RUNNING["test"] = item


# The files that take longest (`pytest --durations=40`: 120-400 s each on 2 cores), handed to the xdist workers
# first so that the two end together; the other files keep their order behind them
LONGEST_FIRST = [
    "test_slurm.py",
    "test_workflow_paper.py",
    "test_workflow_beyond.py",
    "test_faults_records.py",
    "test_workflow_extensions.py",
    "test_compile.py",
    "test_workflow_embeddings.py",
    "test_workflow_sweeps.py",
    "test_faults_stale.py",
    "test_faults.py",
    "test_preflight.py",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (a stable sort). Tests marked `cuda` run only where torch can use CUDA; elsewhere each
    is skipped with the reason, so CI (no GPU) counts them as skipped, never as passed."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    needs_cuda = [item for item in items if item.get_closest_marker("cuda")]
    if not needs_cuda:
        return
    import torch  # only when a cuda test is collected (OMP_WAIT_POLICY above is set by then)

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs CUDA: torch {torch.__version__} sees no CUDA device")
    for item in needs_cuda:
        item.add_marker(skip)


ZYGOTE_ENV = {**os.environ, "PYTHONHASHSEED": "0"}  # before any test changes it: the environment the zygote starts in
ZYGOTE: list[Zygote] = []  # this process's snakemake zygote (tests/snakemake_zygote.py), started on first use
JOB_ZYGOTE: list[JobZygote] = []  # and the one its starts' script jobs fork from (tests/job_zygote.py)


def snakemake_command(workdir: Path, code: Path = REPO) -> list[str]:
    """`python -m snakemake` of this venv on the workflow of the tree `code`, working in `workdir`."""
    return [sys.executable, "-m", "snakemake", "--snakefile", str(code / "Snakefile"), "--directory", str(workdir)]


def run_snakemake(args: list[str], cwd: Path = REPO, check: bool = True, timeout: int = 600):
    """Run snakemake from this venv on the repo's workflow; return the CompletedProcess. Only a test marked
    `slow` may: a snakemake start costs seconds, and `pytest -m "not slow"` is the fast tier. The start is a child of
    this process's zygote (tests/snakemake_zygote.py), which has imported snakemake already, unless
    TESTS_SNAKEMAKE_ZYGOTE=0 or the environment asks for a fresh interpreter. Its script jobs fork from the job zygote
    (tests/job_zygote.py), which has imported torch and the other libraries they import, unless TESTS_JOB_ZYGOTE=0."""
    test = RUNNING.get("test")
    if test is not None and test.get_closest_marker("slow") is None:
        pytest.fail(f"{test.nodeid} starts snakemake: mark it @pytest.mark.slow (pyproject.toml's marker)")
    cmd = [*snakemake_command(cwd), *args]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    forked = os.environ.get("TESTS_SNAKEMAKE_ZYGOTE") != "0"  # "0": every start a fresh interpreter
    if forked and (not ZYGOTE or ZYGOTE[0].proc.poll() is not None):
        if os.environ.get("TESTS_JOB_ZYGOTE") != "0" and not JOB_ZYGOTE:
            JOB_ZYGOTE.append(JobZygote(ZYGOTE_ENV))
            atexit.register(JOB_ZYGOTE[0].close)
        ZYGOTE[:] = [Zygote(ZYGOTE_ENV, str(JOB_ZYGOTE[0].python) if JOB_ZYGOTE else None)]
        atexit.register(ZYGOTE[0].close)  # reaped before this process ends, its CPU counted with this process's
    if forked and ZYGOTE[0].can_run(env):
        proc = ZYGOTE[0].run(cmd, env, timeout)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def write_config(path: Path, overrides: dict) -> Path:
    """A config file holding only the overrides; snakemake merges it over config.yaml."""
    path.write_text(yaml.safe_dump(overrides, sort_keys=False))
    return path


ONE_RUN = "results/sst2_glove6b50d/Pretrained/seed0/base"  # the one run of one_run_config's grid


def one_run_config(path: Path, mirror: Path, **extra) -> Path:
    """One SST-2 run on the tiny mirror, started from GloVe 6B 50d (the PyPI stand-in)."""
    return write_config(
        path,
        {
            "mirror": str(mirror),
            "run_blocks": ["sst2_glove6b50d"],
            "remotes": {"glue/SST-2/train.tsv": {"sha256": None}, "glue/SST-2/dev.tsv": {"sha256": None}},
            "model": {"max_len": 64},
            "blocks": {"sst2_glove6b50d": {"seeds": 1, "epochs": 1, "batch_size": 8, "initializers": ["Pretrained"]}},
            **extra,
        },
    )


@pytest.fixture(scope="session")
def one_run_grid(tmp_path_factory, shared_mirror) -> Path:
    """A working directory holding one_run_config's run on the shared mirror (its config in c.yaml), built once per
    session: a test reads it, or changes a copy of it (shutil.copytree keeps the files' times, so the copy is as
    up to date as the grid)."""
    grid = tmp_path_factory.mktemp("one_run_grid")
    cfg = one_run_config(grid / "c.yaml", shared_mirror)
    run_snakemake([f"{ONE_RUN}/final.json", "--cores", "1", "--configfile", str(cfg)], cwd=grid)
    return grid


def run_outcome(workdir: Path) -> tuple[pd.DataFrame, dict]:
    """What ONE_RUN produced, without its timings: the metric rows and final.json's selected values."""
    metrics = pd.read_parquet(workdir / ONE_RUN / "metrics.parquet").drop(columns=TIMING)
    final = json.loads((workdir / ONE_RUN / "final.json").read_text())
    return metrics, {
        k: v for k, v in final.items() if k not in ("train_minutes_per_epoch", "valid_minutes_per_epoch", "device")
    }


def assert_same_outcome(workdir: Path, expected_workdir: Path) -> None:
    got, expected = run_outcome(workdir), run_outcome(expected_workdir)
    pd.testing.assert_frame_equal(got[0], expected[0])
    assert got[1] == expected[1]


def planned_outputs(proc) -> set[str]:
    """Every output file a `snakemake -n` run lists (its "output:" lines)."""
    return {
        f
        for line in proc.stdout.splitlines()
        if line.strip().startswith("output:")
        for f in re.split(r",\s*", line.split("output:", 1)[1].strip())
    }


STAND_IN = "GloVe-6B-50d (stand-in for GloVe 840B)"
TABLES_CONFIG = {  # a config for embinit.reports.tables / paper_comparison on fabricated runs
    "tasks": {
        t: {"kind": k} for t, k in [("sst2", "classification"), ("mnli", "classification"), ("multi30k", "translation")]
    },
    "initializers": ["Xavier", "Pretrained", "Pretrained_Xavier", "Xavier_Pretrained", "Pretrained_Shuffled"],
    "initializer_params": {},  # every name its own registry entry's, without parameters
    "sources": {"glove6b50d": {"display": STAND_IN}, "bert": {"display": "BERT"}},
    "blocks": {
        "sst2_glove6b50d": {"task": "sst2", "sources": {"encoder": "glove6b50d"}, "family": "GloVe"},
        "sst2_bert": {"task": "sst2", "sources": {"encoder": "bert"}, "family": "BERT"},
        "mnli_bert": {"task": "mnli", "sources": {"encoder": "bert"}, "family": "BERT"},
        "multi30k_glove6b50d": {
            "task": "multi30k",
            "sources": {"encoder": None, "decoder": "glove6b50d"},
            "family": "GloVe",
        },
    },
    "variants": {
        "base": {"pos_encoding": "sinusoidal", "embedding_trainable": True},
        "frozen": {"pos_encoding": "sinusoidal", "embedding_trainable": False},
        "nopos": {"pos_encoding": "none", "embedding_trainable": True},
        "nopos_frozen": {"pos_encoding": "none", "embedding_trainable": False},
    },
    "model": {"init": "recipe", "final_norm": True},  # the run sheet names the recipe's switches
    "train": {"batching": "random"},
    "table3": {
        "block": "multi30k_glove6b50d",
        "initializers": ["Xavier", "Pretrained", "Pretrained_Xavier"],
        "variants": ["nopos_frozen", "nopos", "frozen", "base"],
    },  # the paper's row order
    "figure1": {"blocks": ["multi30k_glove6b50d"], "initializers": ["Xavier", "Pretrained"]},
}


def md_rows(markdown: str) -> list[list[str]]:
    """The cells of every pipe-table row of a Markdown text (header rows included, alignment rows left out),
    stripped of the padding the writer adds."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("|") and not set(line.strip()) <= set("|-: ")
    ]


def md_has_row(markdown: str, *cells: str) -> bool:
    """Whether some table row of `markdown` holds `cells` as consecutive cells."""
    n = len(cells)
    return any(list(cells) == row[i : i + n] for row in md_rows(markdown) for i in range(len(row) - n + 1))


def save_runs(tmp_path: Path, records: list[dict], config: dict = TABLES_CONFIG) -> pd.DataFrame:
    """Fabricated runs as the run sheet's rows (embinit.workflow.runsheet.describe): each record written as
    <block>/<initializer>/seed<k>/<variant>/final.json (column `final`), its metrics.parquet beside it (`metrics`)."""
    from embinit.workflow.runsheet import describe

    rows = []
    for r in records:
        run_dir = tmp_path / r["block"] / r["initializer"] / f"seed{r['seed']}" / r["variant"]
        run_dir.mkdir(parents=True)
        (run_dir / "final.json").write_text(json.dumps(r))
        rows.append(
            describe(config, r["block"], r["initializer"], r["seed"], r["variant"])
            | {"final": str(run_dir / "final.json"), "metrics": str(run_dir / "metrics.parquet")}
        )
    return pd.DataFrame(rows)


def write_metrics(runs: pd.DataFrame, epochs: int, **columns) -> None:
    """Each fabricated run's metrics.parquet (column `metrics` of `save_runs`' rows): epochs 1 to `epochs`, and a
    column per keyword, its value a function of the run's row and the epoch."""
    for run in runs.to_dict("records"):
        values = {name: [f(run, e) for e in range(1, epochs + 1)] for name, f in columns.items()}
        pd.DataFrame({"epoch": range(1, epochs + 1), **values}).to_parquet(run["metrics"])


# IWSLT2017 de-en as the archive data/2017-01-trnted/texts/de/en/de-en.zip holds it (members de-en/<name>) and the
# mirror places it (iwslt2017/de-en/<name>): train.tags interleave a talk's metadata tags with its sentence lines;
# dev and test files are XML, one <seg> per line, the German srcset line by line beside the English refset.
IWSLT_TEST_SETS = [f"tst{year}" for year in range(2010, 2016)]
TALK_TAGS = [
    "<url>http://www.ted.com/talks/{lang}/a_talk.html</url>",
    "<keywords>talks, science</keywords>",
    "<speaker>A. Speaker</speaker>",
    "<talkid>{talk}</talkid>",
    "<title>A. Speaker: a talk ({lang})</title>",
    "<description>TED Talk Subtitles and Transcript: a talk in {lang}</description>",
]


def _iwslt_train(pairs_by_talk: list[list[tuple[str, str]]], side: int) -> list[str]:
    lines = []
    for talk, pairs in enumerate(pairs_by_talk, start=1):
        lines += [tag.format(lang=("de", "en")[side], talk=talk) for tag in TALK_TAGS]
        lines += [pair[side] for pair in pairs]
    return lines


def _iwslt_xml(set_name: str, pairs_by_talk: list[list[tuple[str, str]]], side: int) -> list[str]:
    opening = (
        f'<srcset setid="iwslt2017-{set_name}" srclang="german">'
        if side == 0
        else f'<refset setid="iwslt2017-{set_name}" srclang="german" trglang="english" refid="ref">'
    )
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>", opening]
    for talk, pairs in enumerate(pairs_by_talk, start=1):
        lines.append(f'<doc docid="{talk}" genre="lectures">')
        lines += [tag.format(lang=("de", "en")[side], talk=talk) for tag in TALK_TAGS if "keywords" not in tag]
        lines += [f'<seg id="{i}"> {pair[side]} </seg>' for i, pair in enumerate(pairs, start=1)]
        lines.append("</doc>")
    return lines + [("</srcset>", "</refset>")[side], "</mteval>"]


def write_iwslt(root: Path) -> dict:
    """Tiny IWSLT2017 files at the default config's paths under `root` (each test set's segments named after it);
    return the config's `files` with those paths."""
    train = [
        [("Danke , Chris .", "Thank you , Chris ."), ("AT&T baut Netze .", "AT&T builds networks .")],
        [("Hallo Welt .", "Hello world .")],
    ]
    folder = root / "iwslt2017" / "de-en"
    folder.mkdir(parents=True, exist_ok=True)
    for side, lang in enumerate(("de", "en")):
        files = {
            f"train.tags.de-en.{lang}": _iwslt_train(train, side),
            f"IWSLT17.TED.dev2010.de-en.{lang}.xml": _iwslt_xml(
                "dev2010", [[("Guten Tag &amp; mehr", "Good day &amp; more")]], side
            ),
        }
        for s in IWSLT_TEST_SETS:
            talk = [(f"Satz {s} {i}", f"sentence {s} {i}") for i in (1, 2)]
            files[f"IWSLT17.TED.{s}.de-en.{lang}.xml"] = _iwslt_xml(s, [talk], side)
        for name, lines in files.items():
            (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    files = load_default_config()["tasks"]["iwslt2017"]["files"]
    return {role: str(root / p) if isinstance(p, str) else [str(root / q) for q in p] for role, p in files.items()}
