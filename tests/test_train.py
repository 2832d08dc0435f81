"""Training runs on tiny generated data in docs/design.md's formats (a few seconds each)."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from closed_forms import translator_parameters
from conftest import TIMING
from embinit.data.vocab import (
    BOS,
    EOS,
    PAD,
    SPECIALS,
    UNK,
    References,
    SpacyTokenizer,
    load_detokenizer,
    read_references,
    write_detokenizer,
    write_references,
)
from embinit.identity import training_code
from embinit.training import Placement, checkpoint, loop, mechanism, scoring
from embinit.training.batching import BucketBatchSampler, RandomBatchSampler, TranslationData, batch_sampler, truncate
from embinit.training.spec import RunFiles, RunSpec

# the mechanism metrics every run measures by default (embinit.training.mechanism; tests/test_mechanism.py)
MECHANISM = {
    "translation": [
        "sigma_encoder",
        "sigma_decoder",
        "input_ratio_encoder",
        "input_ratio_decoder",
        "entropy_encoder_0",
        "entropy_decoder_self_0",
        "entropy_decoder_cross_0",
        "saturation_encoder_0",
        "saturation_decoder_self_0",
        "saturation_decoder_cross_0",
        "grad_norm_embedding",
        "grad_norm_other",
    ],
    "classification": [
        "sigma_encoder",
        "input_ratio_encoder",
        "entropy_encoder_0",
        "saturation_encoder_0",
        "grad_norm_embedding",
        "grad_norm_other",
    ],
}
WORDS = 16
DIM = 16
CPU = Placement(device="cpu")


def train_run(spec, out_dir):
    return loop.train_run(*job_of(spec), out_dir, CPU)


FILE_KEYS = ("data", "embeddings", "detokenizer", "references")


def job_of(spec: dict) -> tuple[RunSpec, RunFiles]:
    """A test's run, written as one dict so that a test changes a setting or a file in one place, split as a train
    job gets it: what the run is, and where its files lie."""
    files = RunFiles(**{k: spec[k] for k in FILE_KEYS if k in spec})
    return RunSpec.of({k: v for k, v in spec.items() if k not in FILE_KEYS}), files


def vocab(prefix):
    tokens = list(SPECIALS) + [f"{prefix}{i}" for i in range(WORDS)]
    return pd.DataFrame(
        {
            "index": range(len(tokens)),
            "token": tokens,
            "count": [0] * 4 + [5] * WORDS,
            "special": [True] * 4 + [False] * WORDS,
            "lm_id": pd.array([None] * len(tokens), "Int64"),
        }
    )


def sentences(rng, n):
    return [rng.integers(4, 4 + WORDS, size=rng.integers(3, 9)).tolist() for _ in range(n)]


def ids_column(lists):
    return pa.array(lists, pa.list_(pa.int32()))


def write_translation(path, rng, n, references_path=None):
    """A tokenized split (layout 3: ids only) and, at `references_path`, its references (the vocab stage's
    files)."""
    words = sentences(rng, n)
    tgt = [[4 + (w - 4 + 1) % WORDS for w in s] for s in words]  # a learnable word-for-word "translation"
    pq.write_table(
        pa.table(
            {
                "src_ids": ids_column([[BOS, *s, EOS] for s in words]),
                "tgt_ids": ids_column([[BOS, *t, EOS] for t in tgt]),
            }
        ),
        path,
    )
    if references_path is not None:
        tokens = [[f"e{w - 4}" for w in t] for t in tgt]
        write_references(references_path, References([" ".join(t) for t in tokens], tokens))


def write_classification(path, rng, n):
    firsts, seconds = sentences(rng, n), sentences(rng, n)
    ids = [[BOS, *a, EOS, *b, EOS] for a, b in zip(firsts, seconds)]
    labels = [a[0] % 3 for a in firsts]  # the class is readable from the first word
    pq.write_table(pa.table({"ids": ids_column(ids), "label": pa.array(labels, pa.int64())}), path)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    rng = np.random.default_rng(0)
    for split, n in [("train", 128), ("valid", 16), ("test", 16)]:
        write_translation(root / f"mt_{split}.parquet", rng, n, root / f"refs_{split}.parquet")
        write_classification(root / f"cls_{split}.parquet", rng, n)
    write_detokenizer(root / "detokenizer.json", vocab("e"), SpacyTokenizer("en"))
    for side in ("encoder", "decoder"):
        np.save(root / f"emb_{side}.npy", rng.normal(0, 0.3, size=(4 + WORDS, DIM)).astype(np.float32))
    return root


def make_spec(toy, kind="translation", **changes):
    prefix = "mt" if kind == "translation" else "cls"
    spec = {
        "kind": kind,
        "data": {split: str(toy / f"{prefix}_{split}.parquet") for split in ("train", "valid", "test")},
        "embeddings": {
            "encoder": str(toy / "emb_encoder.npy"),
            "decoder": str(toy / "emb_decoder.npy") if kind == "translation" else None,
        },
        "detokenizer": str(toy / "detokenizer.json") if kind == "translation" else None,
        "references": {
            split: str(toy / f"refs_{split}.parquet") if kind == "translation" else None for split in ("valid", "test")
        },
        "model": {
            "ffn_dim": 32,
            "layers": 1,
            "dropout": 0.1,
            "heads": 2,
            "heads_by_dim": {300: 10},
            "pos_base": 10000,
            "max_len": 32,
            "init": "recipe",
            "final_norm": True,
        },
        "train": {
            "adam_betas": [0.9, 0.98],
            "adam_eps": 1e-9,
            "bf16": True,
            "batching": "random",
            "bucket_width": 2,
            "decode_max_extra": 5,
        },
        "variant": {"pos_encoding": "sinusoidal", "embedding_trainable": True},
        "epochs": 3,
        "batch_size": 8,
        "lr": 1e-2,
        "seed": 7,
        "num_classes": 3,
        "run": {"task": "toy", "block": "toy_block", "initializer": "Xavier", "seed": 7, "variant": "base"},
    }
    spec.update(changes)
    return spec


def metric_values(out_dir):
    return pd.read_parquet(out_dir / "metrics.parquet").drop(columns=TIMING, errors="ignore")


def selected(final):
    timing_free = {
        k: v for k, v in final.items() if k not in ("train_minutes_per_epoch", "valid_minutes_per_epoch", "device")
    }
    return json.dumps(timing_free, sort_keys=True)


@pytest.fixture(scope="module")
def reference_run(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    return out, train_run(make_spec(toy), out)


def test_translation_run_writes_its_outputs(reference_run, toy):
    out, final = reference_run
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert list(metrics.columns) == [
        "epoch",
        "train_loss",
        "valid_loss",
        "valid_paper_bleu",
        "valid_sacrebleu",
        *MECHANISM["translation"],
        *TIMING,
    ]
    assert metrics["epoch"].tolist() == [1, 2, 3]
    assert json.loads((out / "final.json").read_text()) == final
    best = metrics.loc[metrics["valid_loss"].idxmin()]
    assert final["best_epoch"] == best["epoch"] and final["best_valid_loss"] == best["valid_loss"]
    assert final["params"] == translator_parameters(4 + WORDS, 4 + WORDS, DIM, ffn_dim=32, layers=1)
    assert final["vocab_sizes"] == {"encoder": 4 + WORDS, "decoder": 4 + WORDS}
    assert final["train_size"] == 128 and final["test_size"] == 16
    assert final["split_sizes"] == {"train": 128, "valid": 16, "test": 16}
    assert final["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert final["paper_bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:none|smooth:none|version:")
    assert final["valid_paper_bleu"] == best["valid_paper_bleu"]
    assert final["block"] == "toy_block" and final["seed"] == 7 and final["variant"] == "base"
    test = read_references(toy / "refs_test.parquet")
    for name in ("test.hyp.txt", "test.ref.txt", "test.tok.hyp.txt", "test.tok.ref.txt"):
        assert len((out / name).read_text().splitlines()) == 16
    assert (out / "test.ref.txt").read_text().splitlines() == test.ref
    assert (out / "test.tok.ref.txt").read_text().splitlines() == [" ".join(t) for t in test.ref_tokens]
    assert (out / "train.log").read_text().count(" epoch ") >= 3
    best_model = torch.load(out / "checkpoint.pt", weights_only=True)["best_model"]
    with np.load(out / "embeddings.npz") as trained:
        assert trained.files == ["encoder", "decoder"]
        for side, key in [("encoder", "encoder.input"), ("decoder", "decoder_input")]:
            assert trained[side].dtype == np.float32 and trained[side].shape == (4 + WORDS, DIM)
            assert np.array_equal(trained[side], best_model[f"{key}.embedding.weight"].numpy())
            # the spread the mechanism metrics measured in the selected epoch is this layer's
            assert np.std(trained[side], ddof=1, dtype=np.float64) == pytest.approx(best[f"sigma_{side}"], rel=1e-12)


def embeddings(out_dir) -> dict:
    with np.load(out_dir / "embeddings.npz") as arrays:
        return {side: arrays[side] for side in arrays.files}


def assert_same_embeddings(out_dir, expected_dir):
    got, expected = embeddings(out_dir), embeddings(expected_dir)
    assert list(got) == list(expected)
    assert all(np.array_equal(got[side], expected[side]) for side in expected)


def force_selection(monkeypatch, kind, chosen):
    """Make epoch `chosen` the one the run reports (translation: lowest validation loss; classification: best
    validation accuracy), whatever it learns; returns each epoch's input embeddings as the epoch left them."""
    metric, value, other = ("valid_loss", 0.5, 9.0) if kind == "translation" else ("valid_acc", 0.9, 0.1)
    # the other epochs: worse than `chosen`, and distinct (no ties)
    seen = {}
    epoch_row = loop.epoch_row

    def forced(run, epoch):
        row = epoch_row(run, epoch)
        seen[epoch] = {
            side: run.model.state_dict()[key].numpy().copy()
            for side, key in mechanism.embedding_keys(run.model).items()
        }
        return {**row, metric: value if epoch == chosen else other + 0.01 * epoch}

    monkeypatch.setattr(loop, "epoch_row", forced)
    return seen


@pytest.mark.parametrize("kind", ["translation", "classification"])
def test_embeddings_npz_holds_the_reported_epochs_layers(toy, tmp_path, monkeypatch, kind):
    seen = force_selection(monkeypatch, kind, chosen=2)
    final = train_run(make_spec(toy, kind), tmp_path)
    assert final["best_epoch"] == 2
    got = embeddings(tmp_path)
    assert list(got) == (["encoder", "decoder"] if kind == "translation" else ["encoder"])
    for side in got:
        assert np.array_equal(got[side], seen[2][side])
        assert not np.array_equal(got[side], seen[3][side])  # the layers moved on after the reported epoch


@pytest.mark.parametrize(
    "files, options, key",
    [
        (("test.tok.ref.txt", "test.tok.hyp.txt"), ["-tok", "none", "-s", "none"], "test_paper_bleu"),
        (("test.ref.txt", "test.hyp.txt"), [], "test_sacrebleu"),
    ],
)
def test_sacrebleu_cli_on_saved_files_reproduces_final_bleu(reference_run, files, options, key):
    out, final = reference_run  # the toy model's paper BLEU is 0 (no 4-gram matches, no smoothing)
    cli = Path(sys.executable).parent / "sacrebleu"
    ref, hyp = (out / f for f in files)
    printed = subprocess.run(
        [cli, ref, "-i", hyp, *options, "-b", "-w", "4"], capture_output=True, text=True, check=True
    ).stdout
    assert float(printed) == round(final[key], 4)


def test_paper_bleu_of_a_perfect_hypothesis_is_100_and_keeps_unk(toy):
    data = TranslationData(toy / "mt_test.parquet", max_len=32)
    references, detokenizer = read_references(toy / "refs_test.parquet"), load_detokenizer(toy / "detokenizer.json")
    perfect = [[t for t in ids.tolist() if t not in (BOS, EOS)] for ids in data.tgt]
    texts = scoring.bleu_texts(perfect, references, detokenizer)
    assert scoring.bleu_scores(texts)["paper_bleu"] == pytest.approx(100)
    assert scoring.bleu_scores(texts)["sacrebleu"] == pytest.approx(100)
    with_unk = [[UNK, *ids[1:]] for ids in perfect]
    texts = scoring.bleu_texts(with_unk, references, detokenizer)
    assert all(line.startswith("<unk> ") for line in texts.tok_hyp)
    assert scoring.bleu_scores(texts)["paper_bleu"] < 100


def test_same_seed_gives_identical_metrics(reference_run, toy, tmp_path):
    out, final = reference_run
    again = train_run(make_spec(toy), tmp_path)
    pd.testing.assert_frame_equal(metric_values(tmp_path), metric_values(out))
    assert selected(again) == selected(final)
    assert (tmp_path / "test.hyp.txt").read_bytes() == (out / "test.hyp.txt").read_bytes()


class Killed(Exception):
    pass


def killed_then_rerun(toy, run_dir, monkeypatch, module, **patches):
    """A run killed by `patches` (names of `module` replaced by functions that raise Killed), then run again
    unpatched in the same directory: the rerun's result and the directory's train.log."""
    for name, replacement in patches.items():
        monkeypatch.setattr(module, name, replacement)
    with pytest.raises(Killed):
        train_run(make_spec(toy), run_dir)
    monkeypatch.undo()
    return train_run(make_spec(toy), run_dir), (run_dir / "train.log").read_text()


def test_killed_run_resumes_to_the_uninterrupted_result(reference_run, toy, tmp_path, monkeypatch):
    out, final = reference_run
    save = checkpoint.save_checkpoint

    def save_then_die(path, checkpoint):
        save(path, checkpoint)
        torch.rand(1000), np.random.rand(10), random.random()  # the dying process's RNGs moved on
        raise Killed

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        train_run(make_spec(toy), tmp_path)
    monkeypatch.undo()
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["epoch"] == 1
    assert not (tmp_path / "final.json").exists()

    resumed = train_run(make_spec(toy), tmp_path)
    assert "resuming toy_block/Xavier/seed7/base after epoch 1" in (tmp_path / "train.log").read_text()
    pd.testing.assert_frame_equal(metric_values(tmp_path), metric_values(out))
    assert selected(resumed) == selected(final)
    assert_same_embeddings(tmp_path, out)


@pytest.mark.slow
def test_killed_classification_run_resumes_to_the_reported_epochs_embeddings(toy, tmp_path, monkeypatch):
    """The best-accuracy epoch (1) lies before the kill (after epoch 2): only the checkpoint still has its layer."""
    spec = make_spec(toy, "classification")
    seen = force_selection(monkeypatch, "classification", chosen=1)
    train_run(spec, tmp_path / "whole")
    save = checkpoint.save_checkpoint

    def save_then_die(path, state):
        save(path, state)
        if state["epoch"] == 2:
            raise Killed

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        train_run(spec, tmp_path / "killed")
    monkeypatch.setattr(checkpoint, "save_checkpoint", save)
    resumed = train_run(spec, tmp_path / "killed")
    assert "after epoch 2" in (tmp_path / "killed" / "train.log").read_text() and resumed["best_epoch"] == 1
    assert_same_embeddings(tmp_path / "killed", tmp_path / "whole")
    assert np.array_equal(embeddings(tmp_path / "killed")["encoder"], seen[1]["encoder"])
    pd.testing.assert_frame_equal(metric_values(tmp_path / "killed"), metric_values(tmp_path / "whole"))


def test_finished_run_with_more_epochs_continues_its_checkpoint(reference_run, toy, tmp_path):
    out, final = reference_run
    train_run(make_spec(toy, epochs=1), tmp_path)
    resumed = train_run(make_spec(toy, epochs=3), tmp_path)
    assert "resuming toy_block/Xavier/seed7/base after epoch 1" in (tmp_path / "train.log").read_text()
    pd.testing.assert_frame_equal(metric_values(tmp_path), metric_values(out))
    assert selected(resumed) == selected(final)


def fresh_run(toy, tmp_path_factory, **changes):
    """The run with `changes` trained from scratch in an empty directory: what any rerun must equal."""
    out = tmp_path_factory.mktemp("fresh")
    return out, train_run(make_spec(toy, **changes), out)


def assert_same_run(out, final, expected_out, expected_final):
    pd.testing.assert_frame_equal(metric_values(out), metric_values(expected_out))
    assert selected(final) == selected(expected_final)


@pytest.mark.slow
def test_checkpoint_of_other_settings_is_discarded_and_the_run_equals_a_fresh_one(toy, tmp_path, tmp_path_factory):
    train_run(make_spec(toy, epochs=1), tmp_path)
    rerun = train_run(make_spec(toy, epochs=2, lr=1e-3), tmp_path)
    assert (
        "it was written for other setting lr; run toy_block/Xavier/seed7/base trains from scratch"
        in (tmp_path / "train.log").read_text()
    )
    assert_same_run(tmp_path, rerun, *fresh_run(toy, tmp_path_factory, epochs=2, lr=1e-3))


@pytest.mark.slow
def test_changed_embedding_file_retrains_a_finished_run_from_scratch(reference_run, toy, tmp_path, tmp_path_factory):
    """The headline rerun: an initializer changed its layer; the path and settings are the same."""
    out, final = reference_run
    layer = tmp_path / "emb_encoder.npy"
    np.save(layer, np.load(toy / "emb_encoder.npy"))
    spec = make_spec(toy)
    spec["embeddings"]["encoder"] = str(layer)
    run_dir = tmp_path / "run"
    train_run(spec, run_dir)
    np.save(layer, np.load(toy / "emb_encoder.npy") * 2)  # the initializer now gives another layer
    rerun = train_run(spec, run_dir)
    assert "other input embeddings.encoder" in (run_dir / "train.log").read_text()
    fresh = tmp_path / "fresh"
    assert_same_run(run_dir, rerun, fresh, train_run(spec, fresh))
    assert metric_values(run_dir)["train_loss"].tolist() != metric_values(out)["train_loss"].tolist()


@pytest.mark.slow
def test_forced_rerun_of_a_finished_run_trains_again_to_the_same_result(reference_run, toy, tmp_path):
    out, final = reference_run
    train_run(make_spec(toy), tmp_path)
    rerun = train_run(make_spec(toy), tmp_path)
    log = (tmp_path / "train.log").read_text()
    assert "the run had finished its 3 epochs, so a rerun trains it again" in log and "resuming" not in log
    assert_same_run(tmp_path, rerun, out, final)


def test_run_killed_after_its_last_epoch_only_scores(reference_run, toy, tmp_path, monkeypatch):
    out, final = reference_run

    def die_writing_final(*args):
        raise Killed

    resumed, log = killed_then_rerun(toy, tmp_path, monkeypatch, loop, write_text_atomic=die_writing_final)
    assert "resuming toy_block/Xavier/seed7/base after epoch 3" in log
    assert_same_run(tmp_path, resumed, out, final)


class Payload:
    """A pickle that runs code when loaded without weights_only."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def flip_bytes(path, count=32):
    """Invert `count` bytes in the middle of the file, inside the weights: torch.load still reads it."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + count] = bytes(255 - b for b in data[middle : middle + count])
    path.write_bytes(bytes(data))
    torch.load(path, weights_only=True)  # no error: only the sidecar's sha256 tells


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["32 flipped bytes", "truncated", "garbage", "foreign pickle", "no sidecar"])
def test_corrupt_checkpoint_is_discarded_with_a_warning_naming_it(reference_run, toy, tmp_path, damage):
    out, final = reference_run
    train_run(make_spec(toy, epochs=1), tmp_path)
    path = tmp_path / "checkpoint.pt"
    marker = tmp_path / "pickle-ran"
    if damage == "32 flipped bytes":
        flip_bytes(path)
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:5000])
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint at all")
    elif damage == "foreign pickle":
        torch.save({"epoch": 1, "rows": Payload(marker)}, path)
    else:
        checkpoint.digest_path(path).unlink()
    rerun = train_run(make_spec(toy), tmp_path)
    log = (tmp_path / "train.log").read_text()
    assert f"WARNING discarding {path}: it is unreadable" in log
    assert not marker.exists()
    assert_same_run(tmp_path, rerun, out, final)


@pytest.mark.slow
def test_kill_between_the_checkpoint_and_its_sidecar_never_resumes_the_unverified_file(
    reference_run, toy, tmp_path, monkeypatch
):
    """Killed after epoch 2's checkpoint was renamed into place, before its sidecar was: epoch 2's file beside
    epoch 1's sha256 is discarded, and the run equals the uninterrupted one."""
    out, final = reference_run
    write = checkpoint.write_text_atomic

    def die_at_epoch_two(path, text):
        if len(checkpoint_rows(tmp_path)) == 2:
            raise Killed
        write(path, text)

    rerun, log = killed_then_rerun(toy, tmp_path, monkeypatch, checkpoint, write_text_atomic=die_at_epoch_two)
    assert "checkpoint.pt: it is unreadable (DigestMismatch: its sha256 " in log and "resuming" not in log
    assert_same_run(tmp_path, rerun, out, final)


def checkpoint_rows(run_dir):
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)["rows"]


def test_temporary_files_of_an_interrupted_save_are_removed_at_the_next_start(toy, tmp_path):
    tmp_path.mkdir(exist_ok=True)
    empty, partial = tmp_path / ".tmp.0123456789ab.checkpoint.pt", tmp_path / ".tmp.ba9876543210.metrics.parquet"
    empty.touch()  # a kill -9 between creating the temporary file and torch.save's first byte
    partial.write_bytes(b"PK\x03\x04 half a zip")
    users = tmp_path / ".tmp.notes"  # not of atomic_path's naming: left alone
    users.write_text("mine")
    train_run(make_spec(toy, epochs=1), tmp_path)
    assert not empty.exists() and not partial.exists() and users.exists()
    assert sorted(p.name for p in tmp_path.glob(".tmp.*")) == [".tmp.notes"]
    assert f"removing {empty}: a temporary file of a save that was interrupted" in (tmp_path / "train.log").read_text()


@pytest.mark.slow
def test_checkpoint_saved_with_two_gpus_rng_resumes_where_none_is_visible(reference_run, toy, tmp_path, monkeypatch):
    """A checkpoint of a node with 2 visible GPUs, resumed on this CPU: the GPUs' states are left out with one
    warning, and the CPU run continues to the uninterrupted result."""
    out, final = reference_run
    save, rng_state = checkpoint.save_checkpoint, checkpoint.rng_state

    def two_gpus(device):
        return dict(rng_state(device), cuda=[torch.zeros(16, dtype=torch.uint8)] * 2, cuda_device=1)

    def save_then_die(path, state):
        save(path, state)
        raise Killed

    resumed, log = killed_then_rerun(
        toy, tmp_path, monkeypatch, checkpoint, rng_state=two_gpus, save_checkpoint=save_then_die
    )
    assert "the checkpoint holds the RNG states of 2 CUDA devices, 0 are visible: restored none" in log
    assert "resuming toy_block/Xavier/seed7/base after epoch 1" in log
    assert_same_run(tmp_path, resumed, out, final)


def test_deterministic_kernels_change_nothing_on_the_cpu(reference_run, toy, tmp_path, monkeypatch):
    out, final = reference_run
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # restored after the run set it
    try:
        again = loop.train_run(*job_of(make_spec(toy)), tmp_path, Placement("cpu", deterministic=True))
    finally:
        torch.use_deterministic_algorithms(False)
    assert_same_run(tmp_path, again, out, final)


def test_checkpoint_loads_as_plain_tensors_and_values(reference_run):
    out, _ = reference_run
    assert subprocess.run(["sha256sum", "--check", "--quiet", "checkpoint.pt.sha256"], cwd=out).returncode == 0
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["finished"] and state["epoch"] == 3
    assert set(state["identity"]["inputs"]) == {  # every file the run reads
        "data.train",
        "data.valid",
        "data.test",
        "embeddings.encoder",
        "embeddings.decoder",
        "detokenizer",
        "references.valid",
        "references.test",
    }


@pytest.mark.parametrize("trainable", [False, True])
def test_frozen_embedding_stays_bit_identical(toy, tmp_path, trainable):
    spec = make_spec(toy, epochs=1, variant={"pos_encoding": "sinusoidal", "embedding_trainable": trainable})
    final = train_run(spec, tmp_path)
    weights = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["model"]
    for side, key in [("encoder", "encoder.input"), ("decoder", "decoder_input")]:
        start = torch.from_numpy(np.load(toy / f"emb_{side}.npy"))
        assert torch.equal(weights[f"{key}.embedding.weight"], start) is not trainable
    assert final["trainable_params"] == final["params"] - (0 if trainable else 2 * (4 + WORDS) * DIM)


def test_non_finite_loss_names_the_run_and_epoch(toy, tmp_path):
    emb = np.load(toy / "emb_encoder.npy")
    emb[4:] = np.nan
    np.save(tmp_path / "nan.npy", emb)
    spec = make_spec(toy)
    spec["embeddings"]["encoder"] = str(tmp_path / "nan.npy")
    with pytest.raises(FloatingPointError, match=r"toy_block/Xavier/seed7/base.*epoch 1"):
        train_run(spec, tmp_path / "run")


@pytest.mark.parametrize("with_test", [True, False])
def test_classification_run(toy, tmp_path, with_test):
    spec = make_spec(toy, "classification", epochs=2)
    if not with_test:
        spec["data"]["test"] = None
    final = train_run(spec, tmp_path)
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    extra = ["test_acc"] if with_test else []
    assert list(metrics.columns) == [
        "epoch",
        "train_loss",
        "valid_loss",
        "valid_acc",
        *extra,
        *MECHANISM["classification"],
        *TIMING,
    ]
    best = metrics.loc[metrics["valid_acc"].idxmax()]
    assert final["best_epoch"] == best["epoch"] and final["best_valid_acc"] == best["valid_acc"]
    assert ("best_test_acc" in final) is with_test
    if with_test:  # MNLI mismatched: the best over epochs, with its own epoch
        best_test = metrics.loc[metrics["test_acc"].idxmax()]
        assert (final["best_test_acc"], final["best_test_epoch"]) == (best_test["test_acc"], best_test["epoch"])
    assert final["vocab_sizes"] == {"encoder": 4 + WORDS}
    assert final["split_sizes"] == {"train": 128, "valid": 16, **({"test": 16} if with_test else {})}
    assert not (tmp_path / "test.hyp.txt").exists()


def padding_share(lengths, batches):
    """Pad tokens / real tokens, over both columns."""
    return sum((lengths[b].max(0) * len(b) - lengths[b].sum(0)).sum() for b in batches) / lengths.sum()


def test_bucket_sampler_makes_full_batches_of_similar_length():
    rng = np.random.default_rng(0)
    src = np.clip(rng.poisson(13, 3000) + 2, 3, 45)  # Multi30k-like; target lengths follow the source's
    lengths = np.stack([src, np.clip(src + rng.integers(-3, 4, 3000), 3, 45)], axis=1)
    sampler = BucketBatchSampler(lengths, 64, 4, torch.Generator().manual_seed(1))
    epoch1, epoch2 = list(sampler), list(sampler)
    assert len(epoch1) == len(sampler) == 47
    assert sorted(np.concatenate(epoch1).tolist()) == list(range(3000))
    assert sorted(len(b) for b in epoch1)[1:] == [64] * 46
    assert any((a != b).any() for a, b in zip(epoch1, epoch2))  # reshuffled every epoch
    shuffled = rng.permutation(3000)
    random_batches = [shuffled[i : i + 64] for i in range(0, 3000, 64)]
    assert padding_share(lengths, epoch1) < min(0.2, padding_share(lengths, random_batches) / 4)
    again = list(BucketBatchSampler(lengths, 64, 4, torch.Generator().manual_seed(1)))
    assert all((a == b).all() for a, b in zip(epoch1, again))


def test_random_sampler_cuts_a_fresh_permutation_into_batches_as_a_shuffling_dataloader():
    """The recipe's batches: every example once per epoch, batches of 64 and a smaller last one, a new order each
    epoch, the same order for the same seed, and no regard for length (its padding is the random batches')."""
    rng = np.random.default_rng(0)
    src = np.clip(rng.poisson(13, 1000) + 2, 3, 45)  # Multi30k-like; target lengths follow the source's
    lengths = np.stack([src, np.clip(src + rng.integers(-3, 4, 1000), 3, 45)], axis=1)
    sampler = batch_sampler("random", lengths, 64, 4, torch.Generator().manual_seed(1))
    assert isinstance(sampler, RandomBatchSampler)
    epoch1, epoch2 = list(sampler), list(sampler)
    assert len(epoch1) == len(sampler) == 16
    assert [len(b) for b in epoch1] == [64] * 15 + [1000 - 15 * 64]
    assert sorted(np.concatenate(epoch1).tolist()) == list(range(1000))
    assert not (np.concatenate(epoch1) == np.concatenate(epoch2)).all()
    # torch's own: the sampler a shuffling DataLoader batches (the loader itself first draws a worker seed)
    shuffle = torch.utils.data.RandomSampler(range(1000), generator=torch.Generator().manual_seed(1))
    torch_batches = list(torch.utils.data.BatchSampler(shuffle, 64, drop_last=False))
    assert torch_batches == [b.tolist() for b in epoch1]
    again = batch_sampler("random", lengths, 64, 4, torch.Generator().manual_seed(1))
    assert all((a == b).all() for a, b in zip(epoch1, again))
    bucketed = batch_sampler("bucketed", lengths, 64, 4, torch.Generator().manual_seed(1))
    assert padding_share(lengths, list(bucketed)) < padding_share(lengths, epoch1) / 4
    with pytest.raises(ValueError, match="unknown batching 'sorted'; allowed: random, bucketed"):
        batch_sampler("sorted", lengths, 64, 4, torch.Generator())


def test_truncation_keeps_eos_and_batches_pad_with_pad(tmp_path):
    assert truncate(np.array([BOS, 5, 6, 7, 8, EOS]), 4).tolist() == [BOS, 5, 6, EOS]
    rng = np.random.default_rng(0)
    write_translation(tmp_path / "t.parquet", rng, 5)
    data = TranslationData(tmp_path / "t.parquet", max_len=6)
    assert max(len(s) for s in data.src) <= 6 and all(s[-1] == EOS for s in data.src)
    src, _ = data.batch([0, 1, 2])
    lengths = [len(data.src[i]) for i in range(3)]
    assert src.dtype == torch.int64 and src.shape == (3, max(lengths))
    for row, length in enumerate(lengths):
        assert (src[row, length:] == PAD).all() and (src[row, :length] != PAD).all()


def test_final_json_names_the_training_code(toy, tmp_path):
    final = train_run(make_spec(toy, epochs=1), tmp_path)
    assert final["training_code"] == checkpoint.code_digest()
    assert json.loads((tmp_path / "final.json").read_text())["training_code"] == final["training_code"]


@pytest.mark.slow
def test_checkpoint_of_other_training_code_is_discarded(toy, tmp_path, monkeypatch):
    train_run(make_spec(toy, epochs=1), tmp_path)
    monkeypatch.setattr(checkpoint, "code_digest", lambda: "edited")
    train_run(make_spec(toy, epochs=2), tmp_path)
    log = (tmp_path / "train.log").read_text()
    assert "it was written for other setting code" in log and "resuming" not in log


def test_the_code_digest_covers_every_model_module():
    """A new module under embinit/models (the fused loss, say) changes a run's result, so its identity."""
    import pkgutil

    import embinit.models

    import embinit.training

    covered = set(training_code.training_modules())
    assert {f"embinit.models.{m.name}" for m in pkgutil.iter_modules(embinit.models.__path__)} <= covered
    assert {f"embinit.training.{m.name}" for m in pkgutil.iter_modules(embinit.training.__path__)} <= covered
    assert {"embinit.models.loss", "embinit.training.loop", "embinit.training.scoring"} <= covered
    # used by the models and the batches: the sinusoidal table, the vocabulary's special ids
    assert {"embinit.layers.position_table", "embinit.data.vocab"} <= covered


def test_without_valid_bleu_a_run_decodes_only_the_test_split(reference_run, toy, tmp_path, monkeypatch):
    """valid_bleu off: the same training and selection (validation loss), no greedy validation decoding."""
    calls = []
    translate = scoring.translate
    monkeypatch.setattr(
        scoring, "translate", lambda model, data, *a: calls.append(len(data)) or translate(model, data, *a)
    )
    final = train_run(make_spec(toy, valid_bleu=False), tmp_path)
    assert calls == [16]  # the test split, once
    metrics = pd.read_parquet(tmp_path / "metrics.parquet")
    assert "valid_paper_bleu" not in metrics.columns
    reference = metric_values(reference_run[0]).drop(columns=["valid_paper_bleu", "valid_sacrebleu"])
    pd.testing.assert_frame_equal(metric_values(tmp_path), reference)
    assert final["valid_paper_bleu"] is None
    assert final["test_paper_bleu"] == reference_run[1]["test_paper_bleu"]


@pytest.mark.slow
@pytest.mark.parametrize("role", ["references.test", "detokenizer"])
def test_changed_scoring_file_retrains_a_finished_run_from_scratch(toy, tmp_path, role):
    """The references and the detokenizer are inputs like any other: a new one reruns the run."""
    spec = make_spec(toy, epochs=1)
    if role == "detokenizer":
        spec["detokenizer"] = str(tmp_path / "detokenizer.json")
        write_detokenizer(spec["detokenizer"], vocab("e"), SpacyTokenizer("en"))
    else:
        spec["references"] = dict(spec["references"], test=str(tmp_path / "refs_test.parquet"))
        write_references(spec["references"]["test"], read_references(toy / "refs_test.parquet"))
    train_run(spec, tmp_path / "run")
    if role == "detokenizer":
        write_detokenizer(spec["detokenizer"], vocab("f"), SpacyTokenizer("en"))
    else:
        refs = read_references(toy / "refs_test.parquet")
        write_references(spec["references"]["test"], References(refs.ref[::-1], refs.ref_tokens[::-1]))
    train_run(dict(spec, epochs=2), tmp_path / "run")
    log = (tmp_path / "run" / "train.log").read_text()
    assert f"it was written for other input {role}" in log and "resuming" not in log


@pytest.mark.slow
def test_placement_is_no_part_of_the_run(toy, tmp_path):
    """Another device setting or thread count continues the same run (the rule keeps it out of its params)."""
    assert Placement.from_config({"train": {"device": "cuda:1", "num_threads": 3}}) == Placement("cuda:1", 3)
    threads = torch.get_num_threads()
    try:
        loop.train_run(*job_of(make_spec(toy, epochs=1)), tmp_path, Placement("cpu", 1))
        assert "device cpu, 1 threads" in (tmp_path / "train.log").read_text()
    finally:
        torch.set_num_threads(threads)
    loop.train_run(*job_of(make_spec(toy, epochs=2)), tmp_path, Placement("cpu"))
    assert "resuming toy_block/Xavier/seed7/base after epoch 1" in (tmp_path / "train.log").read_text()


def test_translation_run_without_its_scoring_files_says_what_is_missing(toy, tmp_path):
    spec = make_spec(toy, detokenizer=None)
    spec["references"] = {"valid": spec["references"]["valid"], "test": None}
    with pytest.raises(ValueError, match="needs references.test, detokenizer"):
        train_run(spec, tmp_path)
    spec = make_spec(toy)
    spec["references"] = dict(spec["references"], test=spec["references"]["valid"])
    spec["data"] = dict(spec["data"], test=spec["data"]["train"])
    with pytest.raises(ValueError, match="holds 16 references, the test split 128 sentences"):
        train_run(spec, tmp_path)


def test_split_of_an_older_layout_is_refused_clearly(tmp_path):
    write_translation(tmp_path / "t.parquet", np.random.default_rng(0), 3)
    frame = pd.read_parquet(tmp_path / "t.parquet").assign(ref="a b", ref_tokens=[["a", "b"]] * 3)
    frame.to_parquet(tmp_path / "layout2.parquet")
    with pytest.raises(ValueError, match="older layout is rebuilt by the vocab rule"):
        TranslationData(tmp_path / "layout2.parquet", max_len=8)
