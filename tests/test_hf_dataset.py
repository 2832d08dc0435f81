"""Tasks from Hugging Face datasets (format hf_dataset): tiny datasets built with `datasets` and saved to disk, read
through prepare and the vocab stage to the tokenized splits, and one short training run."""

import json
import logging
import re

import datasets
import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import DE, EN, REPO, run_snakemake, write_config
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError, validate
from embinit.data.hf_dataset import HFDataset, prepare, saved_files
from embinit.data.prepare import DataError, splits_of
from embinit.data.vocab import BOS, EOS, build, load_tokenizer
from test_config import SCHEMA, _config
from test_train import CPU, job_of, make_spec
from embinit.training import loop

SENTENCES = ["a gripping , funny film", "dull and lifeless", "a funny , warm film", "lifeless and dull plot"]
LABELS = datasets.ClassLabel(names=["negative", "positive"])


def _save(tmp_path, splits: dict[str, dict], features=None):
    path = tmp_path / "saved"
    datasets.DatasetDict({s: datasets.Dataset.from_dict(c, features=features) for s, c in splits.items()}).save_to_disk(
        path
    )
    return str(path)


def _single(tmp_path):
    """An SST-2-like dataset: one text field, a ClassLabel, splits train and validation."""
    columns = {"sentence": SENTENCES * 5, "label": [1, 0, 1, 0] * 5, "idx": list(range(20))}
    features = datasets.Features(
        {"sentence": datasets.Value("string"), "label": LABELS, "idx": datasets.Value("int32")}
    )
    small = {k: v[:4] for k, v in columns.items()}
    return _save(tmp_path, {"train": columns, "validation": small}, features)


def _dataset(tmp_path, path, kind="classification", **settings) -> HFDataset:
    defaults = {"classification": {"text": ["sentence"], "label": "label"}, "translation": {"src": "de", "tgt": "en"}}
    section = {"path": path, "splits": {"train": "train", "valid": "validation"}, **defaults[kind], **settings}
    return HFDataset.from_config("toy", kind, section, num_classes=2 if kind == "classification" else None)


def _outs(tmp_path, splits=("train", "valid")):
    return {s: str(tmp_path / f"{s}.parquet") for s in splits}


def test_single_text_task_runs_from_saved_dataset_to_a_trained_model(tmp_path):
    outs = _outs(tmp_path)
    assert prepare(_dataset(tmp_path, _single(tmp_path)), outs) == {"train": 20, "valid": 4}
    train = pd.read_parquet(outs["train"])
    assert list(train.columns) == ["text_a", "text_b", "label"]
    assert train["text_a"].tolist() == SENTENCES * 5 and train["text_b"].isna().all()
    assert train["label"].tolist() == [1, 0, 1, 0] * 5 and str(train["label"].dtype) == "int64"

    (tmp_path / "ids").mkdir()
    ids = _outs(tmp_path / "ids")
    encoder = {"encoder": load_tokenizer("spacy", "en")}
    sizes = build("classification", outs, encoder, 1, {"encoder": str(tmp_path / "vocab.parquet")}, ids)
    tokenized = pd.read_parquet(ids["valid"])
    assert list(tokenized.columns) == ["ids", "label"] and tokenized["label"].tolist() == [1, 0, 1, 0]
    assert [list(i).count(EOS) for i in tokenized["ids"]] == [1] * 4  # one sentence each: <bos> a <eos>

    rng = np.random.default_rng(0)
    np.save(tmp_path / "emb.npy", rng.normal(0, 0.3, size=(sizes["encoder"], 16)).astype(np.float32))
    spec = make_spec(tmp_path, "classification", epochs=1, num_classes=2)
    spec["data"] = {**ids, "test": None}
    spec["embeddings"]["encoder"] = str(tmp_path / "emb.npy")
    final = loop.train_run(*job_of(spec), tmp_path / "run", CPU)
    assert final["split_sizes"] == {"train": 20, "valid": 4} and final["train_size"] == 20
    assert final["vocab_sizes"] == {"encoder": sizes["encoder"]}


def test_sentence_pairs_with_label_names_and_a_test_split(tmp_path):
    pairs = {"premise": EN, "hypothesis": EN[::-1], "gold": ["yes", "no", "yes", "no", "no", "yes"]}
    path = _save(tmp_path, {"train": pairs, "dev": pairs, "dev_mm": {k: v[:2] for k, v in pairs.items()}})
    splits = {"train": "train", "valid": "dev", "test": "dev_mm"}
    ds = _dataset(tmp_path, path, text=["premise", "hypothesis"], label="gold", labels=["no", "yes"], splits=splits)
    outs = _outs(tmp_path, ("train", "valid", "test"))
    assert prepare(ds, outs) == {"train": 6, "valid": 6, "test": 2}
    test = pd.read_parquet(outs["test"])
    assert test.to_dict("list") == {"text_a": EN[:2], "text_b": EN[::-1][:2], "label": [1, 0]}

    ids = {s: str(tmp_path / f"ids_{s}.parquet") for s in outs}
    build("classification", outs, {"encoder": load_tokenizer("spacy", "en")}, 1, {"encoder": str(tmp_path / "v")}, ids)
    first = list(pd.read_parquet(ids["test"])["ids"][0])
    assert first[0] == BOS and first[-1] == EOS and first.count(EOS) == 2  # <bos> a <eos> b <eos>


def test_translation_pair_from_a_struct_field(tmp_path):
    """The `translation` dict column of the hub's translation datasets, named as flattened: translation.de."""
    rows = {"translation": [{"de": d, "en": e} for d, e in zip(DE, EN)]}
    path = _save(tmp_path, {"train": rows, "validation": rows, "test": rows})
    splits = {"train": "train", "valid": "validation", "test": "test"}
    ds = _dataset(tmp_path, path, "translation", src="translation.de", tgt="translation.en", splits=splits)
    outs = _outs(tmp_path, ("train", "valid", "test"))
    assert prepare(ds, outs) == {"train": 6, "valid": 6, "test": 6}
    assert pd.read_parquet(outs["test"]).to_dict("list") == {"src": DE, "tgt": EN}

    tokenizers = {"encoder": load_tokenizer("spacy", "de"), "decoder": load_tokenizer("spacy", "en")}
    ids = {s: str(tmp_path / f"ids_{s}.parquet") for s in outs}
    refs = {s: str(tmp_path / f"refs_{s}.parquet") for s in ("valid", "test")}
    vocab = {s: str(tmp_path / f"v_{s}.parquet") for s in tokenizers}
    build("translation", outs, tokenizers, 1, vocab, ids, str(tmp_path / "detok.json"), refs)
    assert len(pd.read_parquet(ids["test"])) == 6
    assert pd.read_parquet(refs["test"])["ref"].tolist() == [s.lower() for s in EN]


def test_a_folder_of_data_files_is_read_through_load_dataset(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    folder = tmp_path / "csv"
    folder.mkdir()
    for split in ("train", "validation"):
        pd.DataFrame({"sentence": SENTENCES, "label": [1, 0, 1, 0]}).to_csv(folder / f"{split}.csv", index=False)
    assert prepare(_dataset(tmp_path, str(folder)), _outs(tmp_path)) == {"train": 4, "valid": 4}


def test_blank_or_missing_sentences_are_dropped_and_named_in_the_log(tmp_path, caplog):
    columns = {"sentence": ["good", "  ", None, "bad"], "label": [1, 0, 1, 0]}
    path = _save(tmp_path, {"train": columns, "validation": columns})
    with caplog.at_level(logging.WARNING):
        sizes = prepare(_dataset(tmp_path, path), _outs(tmp_path))
    assert sizes == {"train": 2, "valid": 2}
    assert "train: dropped 2 row(s)" in caplog.text and "row(s) 1, 2" in caplog.text
    assert pd.read_parquet(tmp_path / "train.parquet")["label"].tolist() == [1, 0]


def _error(tmp_path, path, **settings) -> str:
    with pytest.raises(DataError) as error:
        prepare(_dataset(tmp_path, path, **settings), _outs(tmp_path))
    assert not (tmp_path / "train.parquet").exists()
    return str(error.value)


def test_an_empty_or_all_blank_split_is_named_in_one_line(tmp_path):
    """Issue 58: a split saved with no rows raised datasets' bare IndexError; one whose rows were all blank got the
    translation files' wording (tag lines)."""
    features = datasets.Features({"sentence": datasets.Value("string"), "label": datasets.Value("int64")})
    train = {"sentence": SENTENCES, "label": [1, 0, 1, 0]}
    empty = _save(tmp_path / "empty", {"train": train, "validation": {"sentence": [], "label": []}}, features)
    assert _error(tmp_path, empty) == (
        f"config key tasks.toy.dataset.path: split(s) validation of {empty} were saved with no rows; give every "
        "split examples, or leave an empty one out of the saved DatasetDict"
    )
    blank = _save(tmp_path / "blank", {"train": train, "validation": {"sentence": [" ", ""], "label": [0, 1]}})
    assert (
        _error(tmp_path, blank)
        == "split 'valid' has no examples: it holds none, or every one was dropped (a blank text)"
    )


def test_map_cache_files_are_not_the_saved_datasets_files(tmp_path):
    """Issue 58: a `.map()` on the loaded dataset writes cache-*.arrow into its folder, which reran every job."""
    path = _single(tmp_path)
    files = saved_files(path)
    datasets.load_from_disk(path)["train"].map(lambda row: {"n": len(row["sentence"])})
    assert any(p.name.startswith("cache-") for p in (tmp_path / "saved").rglob("*.arrow"))
    assert saved_files(path) == files and any(f.endswith("data-00000-of-00001.arrow") for f in files)


def test_a_missing_field_or_split_names_the_config_key_and_what_the_dataset_has(tmp_path):
    path = _single(tmp_path)
    assert _error(tmp_path, path, text=["sentence", "sentence2"]) == (
        f"config key tasks.toy.dataset.text[1]: field 'sentence2' is not in split 'train' of {path}; "
        "its fields: sentence, label, idx"
    )
    assert _error(tmp_path, path, label="gold") == (
        f"config key tasks.toy.dataset.label: field 'gold' is not in split 'train' of {path}; "
        "its fields: sentence, label, idx"
    )
    assert _error(tmp_path, path, splits={"train": "train", "valid": "dev"}) == (
        f"config key tasks.toy.dataset.splits.valid: split 'dev' is not in {path}; its splits: train, validation"
    )


def test_labels_outside_the_classes_fail_with_split_and_row(tmp_path):
    hidden = _save(tmp_path, {"train": {"sentence": SENTENCES, "label": [1, 0, -1, 0]}})
    assert _error(tmp_path, hidden, splits={"train": "train", "valid": "train"}) == (
        f"split 'train' ('train' of {hidden}) row 2: label -1 of field 'label' is not a class id 0..1 (give config "
        "key tasks.toy.dataset.labels to map other values); -1 marks a hidden label, as in GLUE's test splits"
    )
    named = _save(tmp_path / "n", {"train": {"sentence": SENTENCES, "label": ["pos", "neg", "meh", "pos"]}})
    assert "row 2: label 'meh' of field 'label' is not one of ['neg', 'pos'] (config key tasks.toy.dataset.labels)" in (
        _error(tmp_path, named, labels=["neg", "pos"], splits={"train": "train", "valid": "train"})
    )
    three = datasets.Features(
        {"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=["a", "b", "c"])}
    )
    path = _save(tmp_path / "c", {"train": {"sentence": SENTENCES, "label": [0, 1, 2, 0]}}, three)
    assert _error(tmp_path, path, splits={"train": "train", "valid": "train"}) == (
        "config key tasks.toy.num_classes: 2, but field 'label' has 3 classes (a, b, c)"
    )


def test_a_field_of_the_wrong_type_or_a_dataset_without_splits_is_refused(tmp_path):
    path = _single(tmp_path)
    assert _error(tmp_path, path, text=["idx"]) == (
        "config key tasks.toy.dataset.text[0]: field 'idx' of split 'train' holds Value('int32'), not text"
    )
    datasets.Dataset.from_dict({"sentence": SENTENCES, "label": [0, 1, 0, 1]}).save_to_disk(tmp_path / "one")
    assert re.fullmatch(
        r"config key tasks\.toy\.dataset\.path: .*one holds one Dataset without splits; save a DatasetDict .*",
        _error(tmp_path, str(tmp_path / "one")),
    )
    assert _error(tmp_path, str(tmp_path / "absent")).startswith(
        f"config key tasks.toy.dataset.path: cannot load {tmp_path / 'absent'}: "
    )


# the CoLA entry of docs/extending.md, as examples/cola.yaml holds it
COLA = yaml.safe_load((REPO / "examples" / "cola.yaml").read_text())


def test_the_documented_cola_entry_is_the_example_file_and_a_valid_config():
    section = (REPO / "docs" / "extending.md").read_text().split("## A task from a Hugging Face dataset")[1]
    shown = section.split("```yaml\n")[1].split("```")[0]
    assert yaml.safe_load(shown) == {"tasks": COLA["tasks"]}
    config = _config(COLA)
    validate(config, SCHEMA, ["config.yaml", "examples/cola.yaml"])
    check(config)
    assert splits_of(config["tasks"]["cola"]) == ["train", "valid"]
    ds = HFDataset.from_config("cola", "classification", config["tasks"]["cola"]["dataset"], 2)
    assert (ds.path, ds.name, ds.fields) == ("nyu-mll/glue", "cola", {"text_a": "sentence", "label": "label"})


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"files": {"train": "glue/SST-2/train.tsv"}}, "tasks.cola.files: format hf_dataset reads a Hugging Face "
         "dataset (key dataset), not files"),
        ({"format": "glue_sst2", "files": {"train": "glue/SST-2/train.tsv"}, "drop_empty": True}, "tasks.cola.dataset: format "
         "glue_sst2 reads raw files (key files), not dataset"),
        ({"dataset": {"src": "de"}}, "tasks.cola.dataset.src: a translation field in a classification task; "
         "it names text, label, labels"),
    ],
)  # fmt: skip
def test_a_task_reads_files_or_a_dataset_with_fields_of_its_kind(change, expected):
    config = _config(COLA)
    entry = config["tasks"]["cola"]
    entry.update({k: v for k, v in change.items() if k != "dataset"})
    entry["dataset"] |= change.get("dataset", {})
    validate(config, SCHEMA, ["config.yaml"])
    with pytest.raises(ConfigError) as error:
        check(config)
    assert str(error.value) == "config key " + expected


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"text": ["a", "b", "c"]}, "tasks.cola.dataset.text: ['a', 'b', 'c'] is too long"),
        ({"splits": {"train": "train", "dev": "validation"}}, "tasks.cola.dataset.splits: 'valid' is a required"),
        ({"labels": "yes"}, "tasks.cola.dataset.labels: 'yes' is not of type 'array'"),
    ],
)
def test_the_schema_names_the_key_of_a_wrong_dataset_entry(change, expected):
    config = _config(COLA)
    config["tasks"]["cola"]["dataset"] |= change
    with pytest.raises(ConfigError) as error:
        validate(config, SCHEMA, ["config.yaml"])
    assert "config key " + expected in str(error.value)


def test_a_translation_dataset_needs_its_pair_and_a_test_split():
    entry = {"kind": "translation", "format": "hf_dataset", "languages": {"encoder": "de", "decoder": "en"}}
    entry |= {"min_freq": 1, "lr": 1e-4, "dataset": {"path": "x", "splits": {"train": "a", "valid": "b"}, "src": "de"}}
    with pytest.raises(ConfigError) as error:
        validate(_config({"tasks": {"mt": entry}}), SCHEMA, ["config.yaml"])
    assert "config key tasks.mt.dataset: 'tgt' is a required property" in str(error.value)
    assert "config key tasks.mt.dataset.splits: 'test' is a required property" in str(error.value)


def test_labels_must_name_each_class_once():
    config = _config(COLA)
    config["tasks"]["cola"]["dataset"]["labels"] = ["bad", "good", "fine"]
    with pytest.raises(ConfigError, match=r"^config key tasks.cola.dataset.labels: 3 values for num_classes = 2;"):
        check(config)


@pytest.mark.slow  # starts snakemake and trains: about a minute on 2 busy cores
def test_a_saved_dataset_runs_through_the_workflow_to_a_run_record(tmp_path):
    path = _single(tmp_path)
    task = {"kind": "classification", "format": "hf_dataset", "languages": {"encoder": "en"}, "num_classes": 2}
    task |= {"min_freq": 1, "lr": 1e-3, "dataset": {"path": path, "splits": {"train": "train", "valid": "validation"}}}
    task["dataset"] |= {"text": ["sentence"], "label": "label"}
    block = {"task": "tiny", "sources": {"encoder": None}, "dim": 16, "epochs": 1, "batch_size": 8, "seeds": 1}
    block |= {"family": "GloVe", "initializers": ["Xavier"]}
    overrides = {"run_blocks": ["tiny_xavier"], "outputs": ["table1"], "model": {"max_len": 64}}
    cfg = write_config(tmp_path / "c.yaml", {**overrides, "tasks": {"tiny": task}, "blocks": {"tiny_xavier": block}})
    run = "results/tiny_xavier/Xavier/seed0/base"
    run_snakemake(["--cores", "1", "--configfile", str(cfg), "--", f"{run}/final.json"], cwd=tmp_path)
    assert json.loads((tmp_path / run / "final.json").read_text())["split_sizes"] == {"train": 20, "valid": 4}
    assert pd.read_parquet(tmp_path / "data/prepared/tiny/valid.parquet")["text_a"].tolist() == SENTENCES
