"""embinit.reports.figures.figure2 on fabricated runs: the mechanism metrics per epoch (Figure 1's tests are in
test_tables.py)."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from conftest import TABLES_CONFIG, save_runs
from embinit.reports import figures

CONFIG = {
    **TABLES_CONFIG,
    "figure2": {"blocks": ["multi30k_glove6b50d", "sst2_glove6b50d"], "initializers": ["Xavier", "Pretrained"]},
}
KIND = {"multi30k_glove6b50d": "translation", "sst2_glove6b50d": "classification"}
EPOCHS = [1, 2, 3]


def mechanism_metrics(block, init, seed):
    """A metrics.parquet's rows with the mechanism columns of the block's model (one layer per stack)."""
    scale = 1.0 if init == "Xavier" else 10.0
    frame = {"epoch": EPOCHS, "train_loss": [3.0, 2.0, 1.5], "valid_loss": [3.1, 2.2, 1.9]}
    sides = ["encoder", "decoder"] if KIND[block] == "translation" else ["encoder"]
    modules = ["encoder_0", "decoder_self_0", "decoder_cross_0"] if KIND[block] == "translation" else ["encoder_0"]
    for side in sides:
        frame[f"sigma_{side}"] = [scale * (0.1 + 0.01 * e + 0.001 * seed) + (side == "encoder") for e in EPOCHS]
        frame[f"input_ratio_{side}"] = [scale * (1 + 0.1 * e) + seed for e in EPOCHS]
    for i, module in enumerate(modules):
        frame[f"entropy_{module}"] = [1.0 + i + 0.1 * e + 0.01 * seed for e in EPOCHS]
        frame[f"saturation_{module}"] = [0.1 * i + 0.01 * e * scale for e in EPOCHS]
    frame["grad_norm_embedding"] = [0.5 / e + seed for e in EPOCHS]
    frame["grad_norm_other"] = [2.0 / e + seed for e in EPOCHS]
    frame["train_seconds"] = [1.0] * 3
    return pd.DataFrame(frame)


def fabricated(tmp_path, seeds=2, without_mechanism=()):
    """Figure 2's run sheet rows: final.json and metrics.parquet of each (block, initializer, seed), base variant."""
    records = [
        {"block": block, "kind": KIND[block], "initializer": init, "seed": seed, "variant": "base"}
        for block in CONFIG["figure2"]["blocks"]
        for init in CONFIG["figure2"]["initializers"]
        for seed in range(seeds)
    ]
    runs = save_runs(tmp_path, records, CONFIG)
    for r in runs.itertuples():
        frame = mechanism_metrics(r.block, r.initializer, r.seed)
        if (r.block, r.initializer, r.seed) in without_mechanism:
            frame = frame[["epoch", "train_loss", "valid_loss", "train_seconds"]]
        frame.to_parquet(r.metrics)
    return runs


def test_figure2_writes_a_png_and_the_long_form_numbers(tmp_path):
    runs = fabricated(tmp_path)
    curves = figures.figure2(runs, tmp_path / "fig2.png", tmp_path / "fig2.csv")
    png = tmp_path / "fig2.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 30_000
    assert imread(png)[..., :3].std() > 0.05  # not blank
    csv = pd.read_csv(tmp_path / "fig2.csv")
    assert csv.columns.tolist() == ["block", "initializer", "epoch", "quantity", "mean", "std", "n_seeds"]
    quantities = list(figures.FIGURE2_QUANTITIES)
    assert len(csv) == 2 * 2 * 3 * len(quantities)  # blocks x initializers x epochs
    assert list(dict.fromkeys(csv.block)) == CONFIG["figure2"]["blocks"]
    assert list(dict.fromkeys(csv.quantity)) == quantities and set(csv.n_seeds) == {2}
    cell = curves.set_index(["block", "initializer", "quantity", "epoch"])
    # translation plots the decoder side
    m30k = [mechanism_metrics("multi30k_glove6b50d", "Pretrained", s).set_index("epoch") for s in range(2)]
    sigma = cell.loc[("multi30k_glove6b50d", "Pretrained", "sigma", 2)]
    assert sigma["mean"] == pytest.approx(np.mean([m.loc[2, "sigma_decoder"] for m in m30k]))
    assert sigma["std"] == pytest.approx(np.std([m.loc[2, "sigma_decoder"] for m in m30k], ddof=1))
    # classification plots the encoder side
    sst2 = mechanism_metrics("sst2_glove6b50d", "Xavier", 0).set_index("epoch")
    assert cell.loc[("sst2_glove6b50d", "Xavier", "sigma", 1), "mean"] == pytest.approx(
        np.mean([mechanism_metrics("sst2_glove6b50d", "Xavier", s).loc[0, "sigma_encoder"] for s in range(2)])
    )
    assert sst2.loc[1, "sigma_encoder"] > 1  # (the encoder offset: the side is the encoder's)
    # entropy and saturation: the mean over the attention modules, then over seeds
    entropy = np.mean(
        [m.loc[3, ["entropy_encoder_0", "entropy_decoder_self_0", "entropy_decoder_cross_0"]].mean() for m in m30k]
    )
    assert cell.loc[("multi30k_glove6b50d", "Pretrained", "entropy", 3), "mean"] == pytest.approx(entropy)
    saturation = np.mean([m.loc[3, [c for c in m.columns if c.startswith("saturation_")]].mean() for m in m30k])
    assert cell.loc[("multi30k_glove6b50d", "Pretrained", "saturation", 3), "mean"] == pytest.approx(saturation)
    grad = cell.loc[("multi30k_glove6b50d", "Xavier", "grad_norm_other", 2)]
    assert (grad["mean"], grad["std"]) == pytest.approx((1.0 + 0.5, np.std([1.0, 2.0], ddof=1)))


def panel_grid(monkeypatch, runs, tmp_path) -> tuple[float, list[int]]:
    """Figure 2's saved width / height and its panels per row on the page, top to bottom."""
    drawn = []
    monkeypatch.setattr(figures, "Figure", lambda **kw: drawn.append(Figure(**kw)) or drawn[-1])
    figures.figure2(runs, tmp_path / "fig2.png", tmp_path / "fig2.csv")
    height, width = imread(tmp_path / "fig2.png").shape[:2]
    extents = [ax.get_window_extent() for ax in drawn[0].axes]  # where the saved figure drew each panel
    rows = pd.Series([round(e.y0) for e in extents]).value_counts().sort_index(ascending=False)
    return width / height, rows.tolist()


def test_figure2_is_a_grid_of_panels_readable_at_page_width(tmp_path, monkeypatch):
    runs = fabricated(tmp_path)
    aspect, rows = panel_grid(monkeypatch, runs[runs.block == "multi30k_glove6b50d"], tmp_path)
    assert 1 <= aspect <= 2.5 and rows == [3, 3]  # six panels in 2 x 3, not one wide row
    aspect, rows = panel_grid(monkeypatch, runs, tmp_path)
    assert aspect < 1 and rows == [3, 3, 3, 3]  # a second block goes below the first


def test_figure2_draws_a_run_without_an_input_ratio_and_a_single_seed(tmp_path):
    runs = fabricated(tmp_path, seeds=1)
    for path in runs.metrics:  # as with pos_encoding none or rotary: nothing is added to the embedding
        pd.read_parquet(path).assign(input_ratio_decoder=np.nan, input_ratio_encoder=np.nan).to_parquet(path)
    curves = figures.figure2(runs, tmp_path / "fig2.png", tmp_path / "fig2.csv")
    assert curves[curves.quantity == "input_ratio"]["mean"].isna().all()
    assert curves["std"].isna().all() and set(curves.n_seeds) <= {0, 1}
    assert (tmp_path / "fig2.png").stat().st_size > 10_000


def test_figure2_names_the_metrics_file_without_mechanism_columns(tmp_path):
    runs = fabricated(tmp_path, without_mechanism={("sst2_glove6b50d", "Pretrained", 1)})
    with pytest.raises(KeyError, match=r"sst2_glove6b50d/Pretrained/seed1/base/metrics.parquet.*train.mechanism"):
        figures.figure2(runs, tmp_path / "fig2.png", tmp_path / "fig2.csv")
    assert not (tmp_path / "fig2.png").exists()


def test_a_side_without_a_source_is_not_named_for_one(tmp_path, monkeypatch):
    """A block whose decoder has no source: Figure 2 plots the decoder, where Pretrained's layer is Xavier's draw, so
    its curve is 'GloVe (no source: Xavier)'; the run's own label stays 'GloVe' (its encoder is GloVe's), and a block
    with no source at all labels the run so."""
    blocks = {
        "m30k_encoder_only": {"task": "multi30k", "sources": {"encoder": "glove6b50d", "decoder": None}},
        "m30k_no_source": {"task": "multi30k", "sources": {"encoder": None, "decoder": None}},
    }
    config = {**CONFIG, "blocks": {**CONFIG["blocks"], **{b: {**c, "family": "GloVe"} for b, c in blocks.items()}}}
    monkeypatch.setitem(KIND, "m30k_encoder_only", "translation")
    records = [
        {"block": "m30k_encoder_only", "kind": "translation", "initializer": init, "seed": 0, "variant": "base"}
        for init in ("Xavier", "Pretrained")
    ]
    runs = save_runs(tmp_path, records, config)
    for r in runs.itertuples():
        mechanism_metrics(r.block, r.initializer, r.seed).to_parquet(r.metrics)
    assert runs.label.tolist() == ["Xavier", "GloVe"]
    assert [figures.side_label(r, "encoder") for r in runs.itertuples()] == ["Xavier", "GloVe"]
    drawn = []
    monkeypatch.setattr(figures, "Figure", lambda **kw: drawn.append(Figure(**kw)) or drawn[-1])
    figures.figure2(runs, tmp_path / "fig2.png", tmp_path / "fig2.csv")
    assert drawn[0].axes[0].get_legend_handles_labels()[1] == ["Xavier", "GloVe (no source: Xavier)"]

    none = save_runs(tmp_path / "none", [{**r, "block": "m30k_no_source"} for r in records], config)
    assert none.label.tolist() == ["Xavier", "GloVe (no source: Xavier)"]
