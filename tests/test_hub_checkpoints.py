"""A `format: hf_checkpoint` source: the input embedding of any hub checkpoint, found from its config.json, read
alone from its weights (one file, or its shard of an index), in the GPT-2, sharded Llama, BERT and T5 layouts that
the tests write here with safetensors, torch.save, tokenizers and sentencepiece."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from conftest import EN, load_default_config, run_snakemake, write_config, write_tiny_mirror
from embinit.workflow.checks import check
from embinit.workflow.runsheet import fetched_raw, layer_sheet, run_sheet
from embinit.workflow.config import ConfigError, add_hub_checkpoints, hub_checkpoint_files, validate
from embinit.data.vocab import build_vocab, load_tokenizer
from embinit.layers import readers
from embinit.layers.readers import read_hf_checkpoint

REPO = Path(__file__).resolve().parents[1]
DIM = 8


def bpe_tokenizer(path: Path) -> None:
    """A byte-level BPE tokenizer.json trained on EN, as GPT-2's is."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(EN * 5, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"]))
    tok.save(str(path))


def wordpiece_tokenizer(path: Path) -> None:
    """A lowercasing WordPiece tokenizer.json with BERT's specials."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(EN * 5, trainers.WordPieceTrainer(vocab_size=120, special_tokens=specials))
    tok.save(str(path))


def sentencepiece_model(path: Path) -> None:
    """A unigram spiece.model with T5's ids (pad 0, eos 1, unk 2, no bos)."""
    import sentencepiece as spm

    corpus = path.with_name("corpus.txt")
    corpus.write_text("\n".join(EN * 20), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(path.with_suffix("")),
        vocab_size=30,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    corpus.unlink()


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).normal(size=shape).astype(np.float32))


def write_checkpoint(root: Path, hub_id: str, layout: str) -> tuple[dict, torch.Tensor]:
    """The hub files of a tiny checkpoint of `layout` under root/huggingface/<hub_id>/, as a mirror holds them;
    returns its config `sources` entry and its input-embedding matrix."""
    folder = root / "huggingface" / hub_id
    folder.mkdir(parents=True)
    tokenizer = "spiece.model" if layout == "t5" else "tokenizer.json"
    {"gpt2": bpe_tokenizer, "llama": bpe_tokenizer, "t5": sentencepiece_model}.get(layout, wordpiece_tokenizer)(
        folder / tokenizer
    )
    n_tokens = load_tokenizer("x", tokenizer_file=str(folder / tokenizer))
    n_tokens = n_tokens._sp.get_piece_size() if layout == "t5" else n_tokens._tok.get_vocab_size()
    vocab_size = n_tokens + 3  # padded past the tokenizer, as T5's 32128 rows for 32100 pieces
    embedding, other = rand(vocab_size, DIM, seed=1), rand(vocab_size, DIM, seed=2)
    width_key = {"gpt2": "n_embd", "t5": "d_model"}.get(layout, "hidden_size")
    config = {"model_type": layout.split("_")[0], "vocab_size": vocab_size, width_key: DIM, "num_hidden_layers": 1}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if layout == "gpt2":  # transformers saves GPT-2 without its `transformer.` prefix; the LM head is tied
        weights = ["model.safetensors"]
        save_file(
            {"wte.weight": embedding, "wpe.weight": rand(16, DIM), "h.0.mlp.c_fc.weight": rand(DIM, 32)},
            str(folder / weights[0]),
        )
    elif layout == "llama":  # two shards; the untied LM head has the embedding's shape and sits in the other one
        weights = [
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ]
        shards = [
            {"model.embed_tokens.weight": embedding, "model.layers.0.mlp.up_proj.weight": rand(32, DIM)},
            {"model.norm.weight": torch.ones(DIM), "lm_head.weight": other},
        ]
        for name, tensors in zip(weights[1:], shards):
            save_file(tensors, str(folder / name))
        weight_map = {tensor: name for name, tensors in zip(weights[1:], shards) for tensor in tensors}
        (folder / weights[0]).write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    elif layout.startswith("bert"):  # the hub's pytorch_model.bin, with or without the `bert.` prefix
        prefix = "bert." if layout == "bert_prefixed" else ""
        weights = ["pytorch_model.bin"]
        state = {
            f"{prefix}embeddings.word_embeddings.weight": embedding,
            f"{prefix}embeddings.position_embeddings.weight": rand(16, DIM),
            f"{prefix}embeddings.token_type_embeddings.weight": rand(2, DIM),
            "cls.predictions.decoder.weight": other,
        }
        torch.save(state, folder / weights[0])
    else:  # T5: `shared`, which both stacks' embed_tokens tie to, beside an untied LM head of the same shape
        weights = ["model.safetensors"]
        tensors = {
            "shared.weight": embedding,
            "lm_head.weight": other,
            "encoder.final_layer_norm.weight": torch.ones(DIM),
        }
        save_file(tensors, str(folder / weights[0]))
    source = {
        "format": "hf_checkpoint",
        "level": "subword",
        "dim": DIM,
        "display": layout,
        "hub_id": hub_id,
        "weights": weights,
        "tokenizer": tokenizer,
    }
    return source, embedding


def rows_of(root: Path, source: dict, name: str = "tiny") -> tuple:
    """The vocabulary the source's own tokenizer builds on EN, and the rows the reader gives it."""
    files = {role: str(root / rel) for role, rel in hub_checkpoint_files(source).items()}
    tokenizer = load_tokenizer(name, tokenizer_file=files["tokenizer"])
    vocab = build_vocab(tokenizer, tokenizer.tokenize(EN), min_freq=1)
    matrix, matched = read_hf_checkpoint(vocab, files, DIM)
    return vocab, matrix, matched


@pytest.mark.parametrize("layout", ["gpt2", "llama", "bert_prefixed", "bert", "t5"])
def test_each_layout_gives_its_input_embedding_rows_by_lm_id(tmp_path, layout):
    source, embedding = write_checkpoint(tmp_path, f"test-org/tiny-{layout}", layout)
    vocab, matrix, matched = rows_of(tmp_path, source)
    ids = vocab["lm_id"][matched].astype("int64").to_numpy()
    assert matched[4:].all() and len(ids) > 20  # every non-special token of the tokenizer's own vocabulary
    np.testing.assert_array_equal(matrix[matched], embedding.numpy()[ids])
    assert not matrix[~matched].any()


def test_a_sharded_checkpoint_reads_only_the_embedding_and_its_shard(tmp_path, monkeypatch):
    source, embedding = write_checkpoint(tmp_path, "test-org/tiny-llama", "llama")
    folder = tmp_path / "huggingface/test-org/tiny-llama"
    (folder / "model-00002-of-00002.safetensors").unlink()  # the shard without the embedding is never fetched
    source["weights"] = source["weights"][:2]
    read = []
    real = readers._safetensor
    monkeypatch.setattr(readers, "_safetensor", lambda path, name: read.append(name) or real(path, name))
    rows_of(tmp_path, source)
    assert read == ["model.embed_tokens.weight"]

    source["weights"] = [source["weights"][0], "model-00002-of-00002.safetensors"]
    with pytest.raises(
        ValueError,
        match=r"index\.json: tensor model\.embed_tokens\.weight is in model-00001-of-00002"
        r"\.safetensors, which the source's `weights` do not list; add it",
    ):
        rows_of(tmp_path, source)


def test_the_tensor_must_have_config_json_s_shape(tmp_path):
    source, _ = write_checkpoint(tmp_path, "test-org/tiny-t5", "t5")
    config = tmp_path / "huggingface/test-org/tiny-t5/config.json"
    settings = json.loads(config.read_text())
    config.write_text(json.dumps({**settings, "vocab_size": settings["vocab_size"] + 1}))
    with pytest.raises(
        ValueError,
        match=r"model\.safetensors: no input-embedding tensor of config\.json's shape "
        r"\(\d+, 8\); tensors named like one .*: shared\.weight \(\d+, 8\)$",
    ):
        rows_of(tmp_path, source)
    config.write_text(json.dumps({**settings, "d_model": 16}))
    with pytest.raises(ValueError, match=r"config\.json: the embedding is 16 wide, but the source's `dim` is 8"):
        rows_of(tmp_path, source)
    config.write_text(json.dumps({"vocab_size": 10}))
    with pytest.raises(
        ValueError,
        match=r"config\.json: a checkpoint's config\.json needs an integer vocab_size and "
        r"one of embedding_size, d_model, hidden_size, n_embd, dim; it has keys vocab_size",
    ):
        rows_of(tmp_path, source)


GPT2_SOURCE = {
    "format": "hf_checkpoint",
    "level": "subword",
    "dim": 768,
    "display": "GPT-2",
    "hub_id": "openai-community/gpt2",
    "weights": ["model.safetensors"],
    "tokenizer": "tokenizer.json",
}


def test_a_hub_id_gives_the_source_its_files_and_remotes():
    config = load_default_config()
    config["sources"]["gpt2"] = dict(GPT2_SOURCE, revision="refs/pr/5")
    config["blocks"]["sst2_gpt2"] = {
        "task": "sst2",
        "sources": {"encoder": "gpt2"},
        "epochs": 1,
        "batch_size": 8,
        "seeds": 1,
        "family": "GPT-2",
    }
    config["remotes"]["huggingface/openai-community/gpt2/config.json"] = {
        "url": "https://example.org/c.json",
        "sha256": "0" * 64,
    }
    validate(config, REPO / "schemas/config.schema.yaml", ["config.yaml"])
    add_hub_checkpoints(config)
    check(config)
    base = "huggingface/openai-community/gpt2"
    assert config["sources"]["gpt2"]["files"] == {
        "config": f"{base}/config.json",
        "tokenizer": f"{base}/tokenizer.json",
        "weights": f"{base}/model.safetensors",
    }
    assert config["remotes"][f"{base}/model.safetensors"] == {
        "url": "https://huggingface.co/openai-community/gpt2/resolve/refs%2Fpr%2F5/model.safetensors",
        "sha256": None,
    }
    assert config["remotes"][f"{base}/config.json"]["url"] == "https://example.org/c.json"  # the config's own wins
    # what preflight and prefetch cover: the block's task files and the checkpoint's three
    config["run_blocks"], config["outputs"] = ["sst2_gpt2"], ["table1"]
    runs = run_sheet(config, {})
    listed = fetched_raw(
        config,
        runs,
        layer_sheet(config, runs),
    )
    assert [f for f in listed if f.startswith(base)] == sorted(config["sources"]["gpt2"]["files"].values())
    add_hub_checkpoints(config)  # a job's Snakefile run sees the same files again
    config["sources"]["gpt2"]["files"]["weights"] = "elsewhere/model.safetensors"
    with pytest.raises(ConfigError, match=r"config key sources\.gpt2\.files: a hf_checkpoint source's files follow"):
        add_hub_checkpoints(config)


def test_the_documented_example_is_a_valid_config():
    """docs/extending.md's GPT-2 source and block, merged over config.yaml as a --configfile is."""
    import re

    import yaml
    from snakemake.utils import update_config

    text = (REPO / "docs/extending.md").read_text(encoding="utf-8")
    example = re.search(r"## A hub checkpoint as a source\n.*?```yaml\n(.*?)```", text, re.S)[1]
    config = load_default_config()
    update_config(config, yaml.safe_load(example))
    validate(config, REPO / "schemas/config.schema.yaml", ["config.yaml", "example"])
    add_hub_checkpoints(config)
    check(config)
    assert config["sources"]["gpt2"]["files"]["weights"] == "huggingface/openai-community/gpt2/model.safetensors"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"weights": ["tf_model.h5"]}, r"sources\.gpt2\.weights\[0\]: 'tf_model\.h5' does not match"),
        ({"tokenizer": "vocab.json"}, r"sources\.gpt2\.tokenizer: 'vocab\.json' does not match"),
        ({"hub_id": "gpt2"}, r"sources\.gpt2\.hub_id: 'gpt2' does not match"),
        ({"level": "word"}, r"sources\.gpt2\.level: 'subword' was expected"),
        ({"hub_id": None}, r"sources\.gpt2: 'hub_id' is a required property"),
    ],
)
def test_schema_names_a_bad_hf_checkpoint_key(change, message):
    config = load_default_config()
    config["sources"]["gpt2"] = {k: v for k, v in {**GPT2_SOURCE, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        validate(config, REPO / "schemas/config.schema.yaml", ["config.yaml"])


def test_other_formats_take_no_hub_checkpoint_keys():
    config = load_default_config()
    config["sources"]["bert"]["weights"] = ["model.safetensors"]
    validate(config, REPO / "schemas/config.schema.yaml", ["config.yaml"])
    with pytest.raises(ConfigError, match=r"^config key sources\.bert\.weights: only a format hf_checkpoint source"):
        add_hub_checkpoints(config)


@pytest.mark.slow
def test_workflow_fetches_a_hub_checkpoint_from_the_mirror_and_extracts_its_rows(tmp_path):
    """Through Snakemake: the source's three files are fetched (and locked), its tokenizer builds the vocabulary,
    and the pre-trained matrix holds the embedding's rows."""
    mirror = write_tiny_mirror(tmp_path / "mirror")
    source, embedding = write_checkpoint(mirror, "test-org/tiny-gpt2", "gpt2")
    cfg = write_config(
        tmp_path / "c.yaml",
        {
            "mirror": str(mirror),
            "run_blocks": ["sst2_tiny"],
            "remotes": {"glue/SST-2/train.tsv": {"sha256": None}, "glue/SST-2/dev.tsv": {"sha256": None}},
            "sources": {"tiny": source},
            "blocks": {
                "sst2_tiny": {
                    "task": "sst2",
                    "sources": {"encoder": "tiny"},
                    "epochs": 1,
                    "batch_size": 8,
                    "seeds": 1,
                    "family": "GPT-2",
                }
            },
        },
    )
    run_snakemake(["results/sst2_tiny/pretrained_encoder.npy", "--cores", "1", "--configfile", str(cfg)], cwd=tmp_path)
    raw = tmp_path / "data/raw/huggingface/test-org/tiny-gpt2"
    assert sorted(p.name for p in raw.glob("*") if not p.name.endswith(".fetched.json")) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    locked = json.loads((tmp_path / "remotes.lock").read_text())
    assert {
        f"huggingface/test-org/tiny-gpt2/{n}" for n in ("config.json", "model.safetensors", "tokenizer.json")
    } <= set(locked)
    import pandas as pd

    vocab = pd.read_parquet(tmp_path / "data/vocab/sst2/tiny/encoder.parquet")
    matched = vocab["lm_id"].notna().to_numpy()
    matrix = np.load(tmp_path / "results/sst2_tiny/pretrained_encoder.npy")
    np.testing.assert_array_equal(matrix[matched], embedding.numpy()[vocab["lm_id"][matched].astype("int64")])
    assert matched.sum() > 10
