"""The outputs of every run (embinit/workflow/outputs.py `Selection.every_run`): the run table, TensorBoard's event files
read back with tensorboard's own reader, the exported layers loaded back, and the run table's page sorting and
filtering in a headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from conftest import ONE_RUN, REPO, load_default_config, run_snakemake
from embinit.reports.export import export_layers
from embinit.reports.runs import html_page, run_table
from embinit.reports.tensorboard import EVENTS, tag, write_tensorboard
from embinit.workflow.runsheet import layer_sheet, recorded_runs, run_sheet

FIRST_RUN = "results/first-run"
PATHS = {
    "final": FIRST_RUN + "/{block}/{init}/seed{seed}/{variant}/final.json",
    "metrics": FIRST_RUN + "/{block}/{init}/seed{seed}/{variant}/metrics.parquet",
    "run": FIRST_RUN + "/{block}/{init}/seed{seed}/{variant}",
}


def first_run_config() -> dict:
    config = load_default_config()
    config.update(outputs=["table1", "runs"], run_blocks=["sst2_glove6b50d"])
    config["blocks"]["sst2_glove6b50d"].update(seeds=3, initializers=["Xavier", "Pretrained"])
    return config


@pytest.fixture
def first_run_rows(monkeypatch) -> pd.DataFrame:
    """The run table's sheet rows of results/first-run's six committed SST-2 runs (paths from the repository)."""
    monkeypatch.chdir(REPO)
    sheet = run_sheet(first_run_config(), PATHS)
    return sheet[sheet.output == "runs"].reset_index(drop=True)


def test_every_run_rows_are_the_configured_outputs_runs_once_then_the_records_no_output_shows(tmp_path):
    config = first_run_config()
    for seed, variant in ((0, "base"), (0, "nopos"), (7, "base")):
        run = tmp_path / "sst2_glove6b50d" / "Xavier" / f"seed{seed}" / variant
        run.mkdir(parents=True)
        (run / "final.json").write_text("{}")
        if variant == "nopos":
            (run / "metrics.parquet").write_bytes(b"")
    (tmp_path / "unknown_block/Xavier/seed0/base").mkdir(parents=True)
    (tmp_path / "unknown_block/Xavier/seed0/base/final.json").write_text("{}")
    (tmp_path / "unknown_block/Xavier/seed0/base/metrics.parquet").write_text("")
    recorded = recorded_runs(config, tmp_path)
    assert recorded == [("sst2_glove6b50d", "Xavier", 0, "nopos")]  # with its metrics, of names the config knows
    sheet = run_sheet(config, {}, recorded)
    rows = sheet[sheet.output == "runs"]
    shown = sheet[sheet.output == "table1"]
    assert len(rows) == len(shown) + 1
    assert rows.shown_in.tolist() == ["table1"] * len(shown) + [""]
    assert rows.iloc[-1][["variant", "pos_encoding"]].tolist() == ["nopos", "none"]
    assert set(sheet.shown_in[sheet.output == "table1"].isna()) == {True}  # other outputs' rows do not carry it


def test_the_run_table_holds_each_records_settings_and_scores(first_run_rows):
    table = run_table(first_run_rows)
    assert len(table) == 6 and table.path.is_unique
    for row in table.itertuples():
        record = json.loads((REPO / row.path / "final.json").read_text())
        assert (row.block, row.initializer, row.seed, row.variant) == tuple(
            record[k] for k in ("block", "initializer", "seed", "variant")
        )
        assert (row.best_valid_acc, row.best_valid_loss, row.lr) == (
            record["best_valid_acc"],
            record["best_valid_loss"],
            record["lr"],
        )
        assert row.training_code == record["training_code"] and row.shown_in == "table1"
        assert row.epochs_run == len(pd.read_parquet(REPO / row.path / "metrics.parquet"))
    assert "test_paper_bleu" not in table  # no run of this set has BLEU: no empty column
    pretrained = table[table.initializer == "Pretrained"].iloc[0]
    assert pretrained.label == "GloVe" and pretrained.initializer_entry == "Pretrained"


def test_tensorboard_events_read_back_with_tensorboards_reader_as_the_metrics_and_settings(first_run_rows, tmp_path):
    table = run_table(first_run_rows)
    write_tensorboard(table, first_run_rows.metrics.tolist(), tmp_path / "a")
    run = table.iloc[4]
    where = tmp_path / "a" / run.block / run.initializer / f"seed{run.seed}" / run.variant
    events = EventAccumulator(str(where))
    events.Reload()
    metrics = pd.read_parquet(REPO / run.path / "metrics.parquet")
    for column in ("train_loss", "valid_acc", "train_seconds"):
        scalars = events.Scalars(tag(column))
        assert [s.step for s in scalars] == metrics.epoch.tolist()
        np.testing.assert_allclose([s.value for s in scalars], metrics[column], rtol=1e-6)
    assert tag("valid_acc") == "score/valid_acc" and tag("sigma_encoder") == "mechanism/sigma_encoder"
    assert events.Scalars("final/best_valid_acc")[0].value == pytest.approx(run.best_valid_acc)
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["initializer"].string_value == run.initializer and hparams["seed"].number_value == run.seed
    assert hparams["lr"].number_value == pytest.approx(run.lr)
    top = EventAccumulator(str(tmp_path / "a"))
    top.Reload()
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        top.PluginTagToContent("hparams")["_hparams_/experiment"]
    ).experiment
    assert {"block", "initializer", "seed", "variant", "lr"} <= {h.name for h in experiment.hparam_infos}
    write_tensorboard(table, first_run_rows.metrics.tolist(), tmp_path / "b")  # the same records, the same bytes
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob(EVENTS))
    assert len(files) == 7  # one a run, one for the experiment
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)


def test_the_layer_sheet_gives_the_export_each_runs_layers_its_vocabularies_and_a_subword_tokenizer():
    config = load_default_config()
    config.update(outputs=["table1"], run_blocks=["sst2_minilm", "multi30k_glove"])
    runs = run_sheet(config, {})
    paths = {
        "layer": "L/{block}/{init}/{seed}/{side}",
        "vocab": "V/{task}/{tokenizer}/{side}",
        "tokenizer": "R/{relpath}",
        "pretrained": "P/{block}/{side}",
        "tokens": "T/{block}/{side}",
    }
    layers = layer_sheet(config, runs, paths)
    layers = layers[layers.output == "layer_export"]
    assert set(layers.path[layers.file == "vocab"]) == {
        "V/sst2/minilm/encoder",
        "V/multi30k/spacy/encoder",
        "V/multi30k/spacy/decoder",
    }
    assert layers.path[layers.file == "tokenizer"].tolist() == [
        f"R/{config['sources']['minilm']['files']['tokenizer']}"
    ]
    seeds = config["blocks"]["multi30k_glove"]["seeds"]
    assert (layers.path == "L/multi30k_glove/Pretrained/0/decoder").sum() == 1
    assert len(layers[(layers.file == "layer") & (layers.block == "multi30k_glove")]) == 3 * seeds * 2


def _vocab(path, tokens, lm_ids):
    pd.DataFrame(
        {
            "index": range(len(tokens)),
            "token": tokens,
            "count": 0,
            "special": [i < 4 for i in range(len(tokens))],
            "lm_id": pd.array(lm_ids, dtype="Int64"),
        }
    ).to_parquet(path)


def test_exported_layers_load_back_equal_to_the_layer_files_with_their_vocabulary(tmp_path):
    tokens = ["<unk>", "<pad>", "<bos>", "<eos>", "ein", "hund"]
    _vocab(tmp_path / "enc.parquet", tokens, [None] * 6)
    _vocab(tmp_path / "dec.parquet", tokens[:5], [None] * 5)
    (tmp_path / "tokenizer.json").write_text('{"model": {}}')
    rng = np.random.default_rng(0)
    rows = [
        {"block": "b", "task": "multi30k", "source": None, "side": "encoder", "file": "vocab", "initializer": None,
         "seed": 0, "path": str(tmp_path / "enc.parquet")},
        {"block": "b", "task": "multi30k", "source": "glove", "side": "decoder", "file": "vocab", "initializer": None,
         "seed": 0, "path": str(tmp_path / "dec.parquet")},
        {"block": "b", "task": "multi30k", "source": None, "side": "encoder", "file": "tokenizer", "initializer": None,
         "seed": 0, "path": str(tmp_path / "tokenizer.json")},
    ]  # fmt: skip
    layers = {}
    for init in ("Xavier", "Pretrained"):
        for side, n in (("encoder", 6), ("decoder", 5)):
            layers[init, side] = rng.normal(size=(n, 4)).astype(np.float32)
            np.save(tmp_path / f"{init}_{side}.npy", layers[init, side])
            source = "glove" if side == "decoder" else None
            rows.append({**rows[0], "side": side, "file": "layer", "initializer": init, "source": source,
                         "path": str(tmp_path / f"{init}_{side}.npy")})  # fmt: skip
    index = export_layers(pd.DataFrame(rows), tmp_path / "out")
    assert len(index) == 4
    for init in ("Xavier", "Pretrained"):
        path = tmp_path / "out" / "b" / init / "seed0.safetensors"
        loaded = load_file(path)
        assert set(loaded) == {"encoder", "decoder"}
        for side in ("encoder", "decoder"):
            assert loaded[side].dtype == np.float32
            np.testing.assert_array_equal(loaded[side], np.load(tmp_path / f"{init}_{side}.npy"))
        with safe_open(path, "np") as f:
            meta = f.metadata()
        assert (meta["initializer"], meta["tokenizer"]) == (init, "tokenizer.json")
        assert json.loads(meta["sources"]) == {"encoder": None, "decoder": "glove"}
        vocab = json.loads((tmp_path / "out" / "b" / json.loads(meta["vocabularies"])["decoder"]).read_text())
        assert vocab["tokens"] == tokens[:5] and vocab["special"] == [True] * 4 + [False]
    assert (tmp_path / "out" / "b" / "tokenizer.json").read_text() == '{"model": {}}'
    np.save(tmp_path / "Xavier_decoder.npy", np.zeros((6, 4), np.float32))  # a row more than its vocabulary
    with pytest.raises(ValueError, match="decoder layer has 6 rows, its vocabulary 5"):
        export_layers(pd.DataFrame(rows), tmp_path / "again")


CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
# Clicks best_valid_loss's name and types a seed into the seed column's box, as a reader would
CLICKS = """<script>
const names = Array.from(document.querySelectorAll("thead th button")).map(b => b.textContent);
document.querySelectorAll("thead th button")[names.indexOf("best_valid_loss")].click();
const box = document.querySelectorAll("thead input")[names.indexOf("initializer")];
box.value = "pretrained"; box.dispatchEvent(new Event("input"));
</script>"""


def rendered(page, script: str, folder) -> tuple[str, list[list[tuple[str, str]]]]:
    """The page's DOM after headless Chromium ran `script` on it, and its body's cells ((data-v, text) per cell)."""
    (folder / "runs.html").write_text(page.replace("</body>", script + "</body>"))
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", (folder / "runs.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    body = dom.split("<tbody>")[1].split("</tbody>")[0]
    return dom, [
        re.findall(r"<td(?: data-v=\"([^\"]*)\")?>([^<]*)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", body)
    ]


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (apt-get install chromium)")
def test_the_run_tables_page_sorts_and_filters_in_headless_chromium(first_run_rows, tmp_path):
    table = run_table(first_run_rows)
    page = html_page(table, "Runs")
    assert "src=" not in page and "href=" not in page  # nothing loaded from elsewhere
    dom, rows = rendered(page, CLICKS, tmp_path)
    column = list(table.columns)
    kept = table[table.initializer.str.lower().str.contains("pretrained")]
    assert len(rows) == len(kept) == 3 and f"{len(kept)} of {len(table)} runs" in dom
    assert {r[column.index("initializer")][1] for r in rows} == {"Pretrained"}
    losses = [float(r[column.index("best_valid_loss")][0]) for r in rows]
    assert losses == sorted(kept.best_valid_loss)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (apt-get install chromium)")
def test_blank_cells_sort_last_both_ways_in_headless_chromium(first_run_rows, tmp_path):
    """Issue 58: sorting descending put the runs without a score first."""
    table = run_table(first_run_rows)
    table.loc[table.index[:2], "best_valid_loss"] = float("nan")  # two runs without the score
    column = list(table.columns).index("best_valid_loss")
    for clicks, ordered in ((1, sorted), (2, lambda v: sorted(v, reverse=True))):
        click = f'document.querySelectorAll("thead th button")[{column}].click();' * clicks
        _, rows = rendered(html_page(table, "Runs"), f"<script>{click}</script>", tmp_path)
        cells = [row[column] for row in rows]
        values = [v or text for v, text in cells]
        assert values[-2:] == ["", ""], values
        assert [float(v) for v in values[:-2]] == ordered(table.best_valid_loss.dropna())


@pytest.mark.slow
def test_the_three_targets_build_from_a_runs_record_and_layer_with_no_other_rule(one_run_grid, tmp_path):
    """The run table, the event files and the exported layer of the one-run grid, by their rules alone."""
    work = tmp_path / "grid"
    shutil.copytree(one_run_grid, work)
    targets = ["runs", "tensorboard", "layer_export"]
    config = ["--configfile", str(work / "c.yaml"), "--config", "outputs=[table1]"]
    run_snakemake([*targets, "--cores", "1", *config, "--allowed-rules", *targets], cwd=work)
    record = json.loads((work / ONE_RUN / "final.json").read_text())
    table = pd.read_parquet(work / "results/runs.parquet")
    assert table[["path", "best_valid_loss"]].values.tolist() == [[ONE_RUN, record["best_valid_loss"]]]
    events = EventAccumulator(str(work / "results/tensorboard/sst2_glove6b50d/Pretrained/seed0/base"))
    events.Reload()
    assert len(events.Scalars("loss/valid_loss")) == record["epochs"]
    layer = load_file(work / "results/layer_export/sst2_glove6b50d/Pretrained/seed0.safetensors")["encoder"]
    np.testing.assert_array_equal(
        layer, np.load(work / "results/sst2_glove6b50d/Pretrained/seed0/embedding_encoder.npy")
    )
