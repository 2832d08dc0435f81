"""Training runs on tiny generated data in docs/design.md's formats (a few seconds each)."""
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from embinit import train
from embinit.batching import BucketBatchSampler, TranslationData, truncate
from embinit.models.translator import expected_parameters
from embinit.vocab import BOS, EOS, PAD, SPECIALS

TIMING = ["wall_seconds", "tokens_per_second"]
WORDS = 16
DIM = 16


def write_vocab(path, prefix):
    tokens = list(SPECIALS) + [f"{prefix}{i}" for i in range(WORDS)]
    pd.DataFrame({"index": range(len(tokens)), "token": tokens, "count": [0] * 4 + [5] * WORDS,
                  "special": [True] * 4 + [False] * WORDS, "lm_id": pd.array([None] * len(tokens), "Int64")}
                 ).to_parquet(path, index=False)


def sentences(rng, n):
    return [rng.integers(4, 4 + WORDS, size=rng.integers(3, 9)).tolist() for _ in range(n)]


def write_translation(path, rng, n):
    words = sentences(rng, n)
    tgt = [[4 + (w - 4 + 1) % WORDS for w in s] for s in words]  # a learnable word-for-word "translation"
    pd.DataFrame({"src_ids": [[BOS, *s, EOS] for s in words], "tgt_ids": [[BOS, *t, EOS] for t in tgt],
                  "ref": [" ".join(f"e{w - 4}" for w in t) for t in tgt]}
                 ).astype({"src_ids": pd.ArrowDtype(__import__("pyarrow").list_(__import__("pyarrow").int32()))}
                         ).to_parquet(path, index=False)


def write_classification(path, rng, n):
    firsts, seconds = sentences(rng, n), sentences(rng, n)
    ids = [[BOS, *a, EOS, *b, EOS] for a, b in zip(firsts, seconds)]
    labels = [int(a[0] % 3) for a in firsts]
    pd.DataFrame({"ids": ids, "label": np.array(labels, dtype=np.int64)}).to_parquet(path, index=False)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    rng = np.random.default_rng(0)
    for split, n in [("train", 64), ("valid", 16), ("test", 16)]:
        write_translation(root / f"mt_{split}.parquet", rng, n)
        write_classification(root / f"cls_{split}.parquet", rng, n)
    write_vocab(root / "vocab_encoder.parquet", "d")
    write_vocab(root / "vocab_decoder.parquet", "e")
    for side in ("encoder", "decoder"):
        np.save(root / f"emb_{side}.npy", rng.normal(0, 0.3, size=(4 + WORDS, DIM)).astype(np.float32))
    return root


def make_spec(toy, kind="translation", **changes):
    prefix = "mt" if kind == "translation" else "cls"
    spec = {
        "kind": kind,
        "data": {split: str(toy / f"{prefix}_{split}.parquet") for split in ("train", "valid", "test")},
        "embeddings": {"encoder": str(toy / "emb_encoder.npy"),
                       "decoder": str(toy / "emb_decoder.npy") if kind == "translation" else None},
        "vocab": {"encoder": str(toy / "vocab_encoder.parquet"), "decoder": str(toy / "vocab_decoder.parquet")},
        "model": {"ffn_dim": 32, "layers": 1, "dropout": 0.1, "heads": 2, "heads_by_dim": {300: 10},
                  "pos_base": 10000, "max_len": 32},
        "train": {"adam_betas": [0.9, 0.98], "adam_eps": 1e-9, "device": "cpu", "bf16": True,
                  "bucket_width": 2, "decode_max_extra": 5, "num_threads": 0},
        "variant": {"pos_encoding": "sinusoidal", "embedding_trainable": True},
        "epochs": 3, "batch_size": 8, "lr": 3e-3, "seed": 7, "num_classes": 3,
        "run": {"task": "toy", "block": "toy_block", "initializer": "Xavier", "seed": 7, "variant": "base"},
    }
    spec.update(changes)
    return spec


def metric_values(out_dir):
    return pd.read_parquet(out_dir / "metrics.parquet").drop(columns=TIMING)


def selected(final):
    timing_free = {k: v for k, v in final.items() if k not in ("minutes_per_epoch", "device")}
    return json.dumps(timing_free, sort_keys=True)


@pytest.fixture(scope="module")
def reference_run(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    return out, train.train_run(make_spec(toy), out)


def test_translation_run_writes_its_outputs(reference_run, toy):
    out, final = reference_run
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert list(metrics.columns) == ["epoch", "train_loss", "valid_loss", "valid_bleu", *TIMING]
    assert metrics["epoch"].tolist() == [1, 2, 3]
    assert json.loads((out / "final.json").read_text()) == final
    best = metrics.loc[metrics["valid_loss"].idxmin()]
    assert final["best_epoch"] == best["epoch"] and final["best_valid_loss"] == best["valid_loss"]
    assert final["parameters"] == expected_parameters(4 + WORDS, 4 + WORDS, DIM, ffn_dim=32, layers=1)
    assert final["vocab_size"] == {"encoder": 4 + WORDS, "decoder": 4 + WORDS}
    assert final["train_size"] == 64 and final["test_size"] == 16
    assert final["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert final["block"] == "toy_block" and final["seed"] == 7 and final["variant"] == "base"
    hyp = (out / "test.hyp.txt").read_text().splitlines()
    ref = (out / "test.ref.txt").read_text().splitlines()
    assert len(hyp) == len(ref) == 16
    assert ref == pd.read_parquet(toy / "mt_test.parquet")["ref"].tolist()
    assert (out / "train.log").read_text().count(" epoch ") >= 3


def test_sacrebleu_cli_on_saved_files_reproduces_final_bleu(reference_run):
    out, final = reference_run
    assert final["test_bleu"] > 0
    cli = Path(sys.executable).parent / "sacrebleu"
    printed = subprocess.run([cli, out / "test.ref.txt", "-i", out / "test.hyp.txt", "-b", "-w", "4"],
                             capture_output=True, text=True, check=True).stdout
    assert float(printed) == round(final["test_bleu"], 4)


def test_same_seed_gives_identical_metrics(reference_run, toy, tmp_path):
    out, final = reference_run
    again = train.train_run(make_spec(toy), tmp_path)
    pd.testing.assert_frame_equal(metric_values(tmp_path), metric_values(out))
    assert selected(again) == selected(final)
    assert (tmp_path / "test.hyp.txt").read_bytes() == (out / "test.hyp.txt").read_bytes()


class Killed(Exception):
    pass


def test_killed_run_resumes_to_the_uninterrupted_result(reference_run, toy, tmp_path, monkeypatch):
    out, final = reference_run
    save = train.save_checkpoint

    def save_then_die(path, checkpoint):
        save(path, checkpoint)
        torch.rand(1000), np.random.rand(10), random.random()  # the dying process's RNGs moved on
        raise Killed

    monkeypatch.setattr(train, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        train.train_run(make_spec(toy), tmp_path)
    monkeypatch.undo()
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["epoch"] == 1
    assert not (tmp_path / "final.json").exists()

    resumed = train.train_run(make_spec(toy), tmp_path)
    assert "resuming toy_block/Xavier/seed7/base after epoch 1" in (tmp_path / "train.log").read_text()
    pd.testing.assert_frame_equal(metric_values(tmp_path), metric_values(out))
    assert selected(resumed) == selected(final)


def test_resume_with_more_epochs_continues_the_checkpoint(reference_run, toy, tmp_path):
    out, final = reference_run
    train.train_run(make_spec(toy, epochs=1), tmp_path)
    resumed = train.train_run(make_spec(toy, epochs=3), tmp_path)
    pd.testing.assert_frame_equal(metric_values(tmp_path), metric_values(out))
    assert selected(resumed) == selected(final)


@pytest.mark.parametrize("trainable", [False, True])
def test_frozen_embedding_stays_bit_identical(toy, tmp_path, trainable):
    spec = make_spec(toy, epochs=1, variant={"pos_encoding": "sinusoidal", "embedding_trainable": trainable})
    final = train.train_run(spec, tmp_path)
    weights = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["model"]
    for side, key in [("encoder", "src_input"), ("decoder", "tgt_input")]:
        start = torch.from_numpy(np.load(toy / f"emb_{side}.npy"))
        assert torch.equal(weights[f"{key}.embedding.weight"], start) is not trainable
    assert final["trainable_parameters"] == final["parameters"] - (0 if trainable else 2 * (4 + WORDS) * DIM)


def test_non_finite_loss_names_the_run_and_epoch(toy, tmp_path):
    emb = np.load(toy / "emb_encoder.npy")
    emb[4:] = np.nan
    np.save(tmp_path / "nan.npy", emb)
    spec = make_spec(toy, embeddings={"encoder": str(tmp_path / "nan.npy"), "decoder": str(toy / "emb_decoder.npy")})
    with pytest.raises(FloatingPointError, match=r"toy_block/Xavier/seed7/base.*epoch 1"):
        train.train_run(spec, tmp_path / "run")


@pytest.mark.parametrize("with_test", [True, False])
def test_classification_run(toy, tmp_path, with_test):
    spec = make_spec(toy, "classification", epochs=2)
    if not with_test:
        spec["data"]["test"] = None
    final = train.train_run(spec, tmp_path)
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    extra = ["test_acc"] if with_test else []
    assert list(metrics.columns) == ["epoch", "train_loss", "valid_loss", "valid_acc", *extra, *TIMING]
    best = metrics.loc[metrics["valid_acc"].idxmax()]
    assert final["best_epoch"] == best["epoch"] and final["valid_acc"] == best["valid_acc"]
    assert ("test_acc" in final) is with_test
    if with_test:
        assert final["test_acc"] == best["test_acc"]
    assert final["vocab_size"] == {"encoder": 4 + WORDS}
    assert not (tmp_path / "test.hyp.txt").exists()


def test_bucket_sampler_makes_full_batches_of_similar_length():
    lengths = np.random.default_rng(0).integers(3, 40, size=(1000, 2))
    sampler = BucketBatchSampler(lengths, 64, 4, torch.Generator().manual_seed(1))
    epoch1, epoch2 = list(sampler), list(sampler)
    assert sorted(np.concatenate(epoch1).tolist()) == list(range(1000))
    assert sorted(len(b) for b in epoch1)[1:] == [64] * (len(epoch1) - 1)
    assert any((a != b).any() for a, b in zip(epoch1, epoch2))  # reshuffled every epoch
    spread = np.median([np.ptp(lengths[b, 0]) for b in epoch1])
    assert spread < 4
    again = list(BucketBatchSampler(lengths, 64, 4, torch.Generator().manual_seed(1)))
    assert all((a == b).all() for a, b in zip(epoch1, again))


def test_truncation_keeps_eos_and_batches_pad_with_pad(tmp_path):
    assert truncate(np.array([BOS, 5, 6, 7, 8, EOS]), 4).tolist() == [BOS, 5, 6, EOS]
    rng = np.random.default_rng(0)
    write_translation(tmp_path / "t.parquet", rng, 5)
    data = TranslationData(tmp_path / "t.parquet", max_len=6)
    assert max(len(s) for s in data.src) <= 6 and all(s[-1] == EOS for s in data.src)
    src, tgt = data.batch([0, 1, 2])
    assert src.dtype == torch.int64 and (src == PAD).any() or src.shape[1] == min(len(s) for s in data.src)
