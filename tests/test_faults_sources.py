"""Damaged source files: weights, checkpoint index, config.json and tokenizers written here in their real formats
(safetensors, torch.save zip and legacy, tokenizers, sentencepiece), then emptied, cut at many points, or swapped
for another format. Each read fails with one DamagedFileError line naming the file and the fix; none reads on."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from conftest import EN
from embinit.data.vocab import load_tokenizer
from embinit.io import DamagedFileError
from embinit.layers.readers import read_hf, read_hf_checkpoint
from test_embeddings import write_vocab

STATE = {  # a tiny BERT-named state dict: the embedding, a position table, a layer
    "embeddings.word_embeddings.weight": torch.arange(40, dtype=torch.float32).reshape(10, 4),
    "embeddings.position_embeddings.weight": torch.ones(6, 4),
    "encoder.layer.0.attention.self.query.weight": torch.eye(4),
}
HTML = b"<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n"  # what a proxy may serve in a file's place


def cuts(size: int, points: int = 120) -> list[int]:
    """Cut lengths 0 (empty) to size - 1: every byte of a small file, else `points` evenly spread, both ends kept."""
    step = max(1, size // points)
    return sorted({*range(0, size, step), size - 1})


def assert_named(error: pytest.ExceptionInfo, path: Path) -> None:
    message = str(error.value)
    assert error.type is DamagedFileError, f"{error.type.__name__}: {message}"
    assert message.startswith(f"{path}: not a readable ") and f"(rm {path})" in message and "\n" not in message


def hf_vocab(tmp_path: Path):
    import pandas as pd

    return pd.read_parquet(write_vocab(tmp_path / "vocab.parquet", ["a", "b"], [1, 0, 2, 3, 5, 6]))


def save_weights(path: Path, kind: str) -> None:
    if kind == "safetensors":
        save_file(STATE, str(path))
    else:
        torch.save(STATE, path, _use_new_zipfile_serialization=kind == "zip")


@pytest.mark.parametrize(
    ("kind", "name"),
    [("safetensors", "model.safetensors"), ("zip", "pytorch_model.bin"), ("legacy", "pytorch_model.bin")],
)
def test_every_cut_of_a_weights_file_is_named_with_its_fix(tmp_path, kind, name):
    whole = tmp_path / "whole" / name
    whole.parent.mkdir()
    save_weights(whole, kind)
    vocab, data = hf_vocab(tmp_path), whole.read_bytes()
    assert read_hf(vocab, {"weights": str(whole)}, 4)[1].sum() == 6  # the whole file reads
    path = tmp_path / name
    for cut in cuts(len(data)):
        path.write_bytes(data[:cut])
        with pytest.raises(Exception) as error:
            read_hf(vocab, {"weights": str(path)}, 4)
        assert_named(error, path)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("model.safetensors", "zip"),  # a PyTorch zip under the safetensors name
        ("pytorch_model.bin", "safetensors"),
        ("model.safetensors", HTML),
        ("pytorch_model.bin", HTML),
    ],
)
def test_a_weights_file_of_another_format_is_named(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        save_weights(path, content)
    with pytest.raises(Exception) as error:
        read_hf(hf_vocab(tmp_path), {"weights": str(path)}, 4)
    assert_named(error, path)


def test_every_cut_of_a_checkpoint_s_config_and_index_is_named(tmp_path):
    """A hf_checkpoint source's own JSON files: config.json and a sharded checkpoint's index."""
    save_file(STATE, str(tmp_path / "model-00001-of-00001.safetensors"))
    config = json.dumps({"model_type": "bert", "vocab_size": 10, "hidden_size": 4}, indent=2).encode()
    index = json.dumps({"weight_map": dict.fromkeys(STATE, "model-00001-of-00001.safetensors")}, indent=2).encode()
    files = {
        "config": str(tmp_path / "config.json"),
        "weights": str(tmp_path / "model.safetensors.index.json"),
        "weights_2": str(tmp_path / "model-00001-of-00001.safetensors"),
    }
    vocab = hf_vocab(tmp_path)
    for role, data in (("config", config), ("weights", index)):
        Path(files["config"]).write_bytes(config)
        Path(files["weights"]).write_bytes(index)
        assert read_hf_checkpoint(vocab, files, 4)[1].sum() == 6
        for cut in [*cuts(len(data)), HTML]:
            Path(files[role]).write_bytes(data[:cut] if isinstance(cut, int) else cut)
            with pytest.raises(Exception) as error:
                read_hf_checkpoint(vocab, files, 4)
            assert_named(error, Path(files[role]))


def write_tokenizer_json(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(EN, trainers.WordPieceTrainer(vocab_size=60, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    tok.save(str(path))


def write_spiece(path: Path) -> None:
    """A small spiece.model: identity normalization keeps the precompiled character map (and the file) small."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(EN * 20),
        model_prefix=str(path.with_suffix("")),
        vocab_size=30,
        normalization_rule_name="identity",
        minloglevel=2,
    )


@pytest.mark.parametrize(("name", "writer"), [("tokenizer.json", write_tokenizer_json), ("spiece.model", write_spiece)])
def test_every_cut_of_a_tokenizer_file_is_named_with_its_fix(tmp_path, name, writer):
    whole = tmp_path / "whole" / name
    whole.parent.mkdir()
    writer(whole)
    data = whole.read_bytes()
    load_tokenizer("src", tokenizer_file=str(whole))  # the whole file reads
    # a JSON file cut in its trailing whitespace is still the whole tokenizer; a sentencepiece model is cut at every
    # byte, so every boundary between two of its fields (where sentencepiece itself reads on) is among the cuts
    points = cuts(len(data.rstrip())) if name.endswith(".json") else range(len(data))
    assert len(data) < 4000
    path = tmp_path / name
    for cut in [*points, HTML]:
        path.write_bytes(data[:cut] if isinstance(cut, int) else cut)
        with pytest.raises(Exception) as error:
            load_tokenizer("src", tokenizer_file=str(path))
        assert_named(error, path)


def test_a_tokenizer_of_another_format_is_named(tmp_path):
    write_spiece(tmp_path / "spiece.model")
    path = tmp_path / "tokenizer.json"
    path.write_bytes((tmp_path / "spiece.model").read_bytes())
    with pytest.raises(Exception) as error:
        load_tokenizer("src", tokenizer_file=str(path))
    assert_named(error, path)
    path.write_text(json.dumps({"vocab_size": 10, "hidden_size": 4}))  # a config.json under the tokenizer's name
    with pytest.raises(Exception) as error:
        load_tokenizer("src", tokenizer_file=str(path))
    assert_named(error, path)
