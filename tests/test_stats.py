import math

import numpy as np
import pandas as pd
import pytest

from conftest import STAND_IN, load_default_config, md_rows
from embinit.layers.position_table import sinusoidal_table
from embinit.reports.statistics import matrix_stats, write_stats_table, write_table6


def test_matrix_stats():
    s = matrix_stats(np.array([[1, 2], [3, 6]], dtype=np.float32))
    assert s == {"min": 1.0, "max": 6.0, "mean": 3.0, "sigma": pytest.approx(np.std([1, 2, 3, 6], ddof=1))}


def _layers(tmp_path, names, shape=(20, 8)):
    rng = np.random.default_rng(0)
    paths = {}
    for i, name in enumerate(names):
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], rng.normal(i, 1 + i, size=shape).astype(np.float32))
    return {k: str(v) for k, v in paths.items()}


def test_table2_layout(tmp_path):
    paths = _layers(tmp_path, ["a", "b", "c", "d"])
    entries = [
        {
            "block": "sst2_glove",
            "task": "sst2",
            "family": "GloVe",
            "source": "glove",
            "initializer": "Xavier",
            "path": paths["a"],
        },
        {
            "block": "sst2_glove",
            "task": "sst2",
            "family": "GloVe",
            "source": "glove",
            "initializer": "Pretrained_Xavier",
            "path": paths["b"],
        },
        {
            "block": "multi30k_glove",
            "task": "multi30k",
            "family": "GloVe",
            "source": "glove",
            "initializer": "Xavier",
            "path": paths["c"],
        },
        {
            "block": "sst2_bert",
            "task": "sst2",
            "family": "BERT",
            "source": "bert",
            "initializer": "Xavier",
            "path": paths["d"],
        },
    ]
    write_stats_table(entries, str(tmp_path / "out" / "table2.csv"), str(tmp_path / "out" / "table2.md"))
    csv = pd.read_csv(tmp_path / "out" / "table2.csv")
    assert csv[["label", "task"]].values.tolist() == [
        ["Xavier", "sst2"],
        ["GloVe_Xavier", "sst2"],
        ["Xavier", "multi30k"],
        ["Xavier", "sst2"],
    ]
    b = np.load(paths["b"])
    assert csv.loc[1, ["min", "max"]].tolist() == [float(b.min()), float(b.max())]
    assert csv.loc[1, "sigma"] == pytest.approx(b.astype(np.float64).std(ddof=1))
    md = md_rows((tmp_path / "out" / "table2.md").read_text())
    assert md[0] == [
        "Family",
        "Initialization",
        "SST2 Range (min, max)",
        "SST2 Mean (sigma)",
        "Multi30k Range (min, max)",
        "Multi30k Mean (sigma)",
    ]
    assert [row[:2] for row in md[1:]] == [["GloVe", "Xavier"], ["GloVe", "GloVe_Xavier"], ["BERT", "Xavier"]]
    assert md[2][-2:] == ["-", "-"]  # GloVe_Xavier has no Multi30k layer here
    assert md[2][2] == f"({b.min():.4f}, {b.max():.4f})"
    lines = (tmp_path / "out" / "table2.md").read_text().splitlines()
    assert lines[1].startswith("|:") and lines[1].count("|") == 7  # a pipe table; text columns left-aligned
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["table2.csv", "table2.md"]


def test_table8_layout_names(tmp_path):
    paths = _layers(tmp_path, ["a"])
    entry = {
        "block": "sst2_bert",
        "task": "sst2",
        "family": "BERT",
        "source": "bert",
        "initializer": "Xavier_Pretrained",
        "path": paths["a"],
    }
    write_stats_table([entry], str(tmp_path / "table8.csv"), str(tmp_path / "table8.md"))
    assert md_rows((tmp_path / "table8.md").read_text())[1][:2] == ["BERT", "Xavier_BERT"]


def test_table6(tmp_path):
    paths = _layers(tmp_path, ["Xavier", "Pretrained", "Pretrained_Xavier"])
    table = write_table6(paths, "GloVe", STAND_IN, 50, 10000, str(tmp_path / "table6.csv"), str(tmp_path / "table6.md"))
    labels = ["Xavier", "Xavier scaled", "GloVe", "GloVe scaled", "GloVe_Xavier", "GloVe_Xavier scaled"]
    assert table["layer"].tolist() == [*labels, "Position encoding"]  # labelled by family, as Tables 2 and 8
    plain, scaled = table.iloc[2], table.iloc[3]
    for key in ("min", "max", "mean", "sigma"):
        assert scaled[key] == pytest.approx(plain[key] * math.sqrt(8), rel=1e-6)
    p = sinusoidal_table(50, 8, 10000)
    assert p[0].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert p[7, 2] == pytest.approx(math.sin(7 / 10000 ** (2 / 8)), abs=1e-6)
    assert p[7, 3] == pytest.approx(math.cos(7 / 10000 ** (2 / 8)), abs=1e-6)
    assert table.iloc[6][["min", "max"]].tolist() == [float(p.min()), float(p.max())]
    text = (tmp_path / "table6.md").read_text()
    md = md_rows(text)
    assert md[0] == ["Layer", "Min", "Max", "Mean (sigma)"] and len(md) == 8
    assert [row[0] for row in md[1:]] == [*labels, "Position encoding"]
    assert f"Source of the GloVe rows: {STAND_IN}." in text  # the source actually used, in the note
    csv = pd.read_csv(tmp_path / "table6.csv")
    assert csv.columns.tolist() == ["layer", "min", "max", "mean", "sigma", "source_display"]
    assert csv.source_display.fillna("").tolist() == ["", "", STAND_IN, STAND_IN, STAND_IN, STAND_IN, ""]


def test_table6_family_names_the_rows(tmp_path):
    paths = _layers(tmp_path, ["Xavier", "Pretrained_Xavier"])
    table = write_table6(paths, "BERT", "BERT", 50, 10000, str(tmp_path / "t.csv"), str(tmp_path / "t.md"))
    assert table["layer"].tolist()[2:4] == ["BERT_Xavier", "BERT_Xavier scaled"]


def test_table6_position_encoding_has_pos_rows_rows(tmp_path):
    """The configured table6.pos_rows gives the paper's P mean 0.131 at D = 300; max_len's 256 rows do not."""
    config = load_default_config()
    paths = _layers(tmp_path, ["Xavier", "Pretrained", "Pretrained_Xavier"], shape=(20, 300))
    rows = {
        n: write_table6(
            paths,
            "GloVe",
            "GloVe",
            n,
            config["model"]["pos_base"],
            str(tmp_path / f"t{n}.csv"),
            str(tmp_path / f"t{n}.md"),
        ).iloc[6]
        for n in (config["table6"]["pos_rows"], 256)
    }
    configured, short = rows[config["table6"]["pos_rows"]], rows[256]
    assert configured["mean"] == pytest.approx(0.131, abs=0.001)
    assert configured["mean"] == pytest.approx(sinusoidal_table(config["table6"]["pos_rows"], 300).mean(), rel=1e-5)
    assert short["mean"] > 0.3
