"""embinit.training.mechanism: the per-epoch mechanism metrics, checked against hand computations, and proof
that measuring them leaves a run's trajectory bit-identical."""

import math
import random

import numpy as np
import pandas as pd
import pytest
import torch

from embinit.layers.initializers import mean_std
from embinit.layers.position_table import sinusoidal_table
from embinit.models import Classifier, ModelConfig, Translator
from embinit.training import mechanism
from embinit.training.batching import ClassificationData, TranslationData
from test_train import DIM, WORDS, make_spec, metric_values, selected, toy, train_run  # noqa: F401

DEVICE = torch.device("cpu")
TRANSLATION_ATTENTION = ["encoder_0", "decoder_self_0", "decoder_cross_0"]


def mechanism_columns(kind):
    sides = ["encoder", "decoder"] if kind == "translation" else ["encoder"]
    modules = TRANSLATION_ATTENTION if kind == "translation" else ["encoder_0"]
    return [
        *(f"sigma_{s}" for s in sides),
        *(f"input_ratio_{s}" for s in sides),
        *(f"entropy_{m}" for m in modules),
        *(f"saturation_{m}" for m in modules),
        "grad_norm_embedding",
        "grad_norm_other",
    ]


@pytest.fixture(scope="module")
def runs(toy, tmp_path_factory):  # noqa: F811
    """(out dir, final) of each kind with the mechanism metrics on and off; also each epoch's time split."""
    made = {}
    for kind in ("translation", "classification"):
        for on in (True, False):
            out = tmp_path_factory.mktemp(f"{kind}_{on}")
            spec = make_spec(toy, kind, epochs=2)
            spec["train"] = dict(spec["train"], mechanism=on)
            made[kind, on] = out, train_run(spec, out)
    return made


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["translation", "classification"])
def test_columns_with_the_metrics_on_and_none_with_them_off(runs, kind):
    on = pd.read_parquet(runs[kind, True][0] / "metrics.parquet")
    off = pd.read_parquet(runs[kind, False][0] / "metrics.parquet")
    expected = mechanism_columns(kind)
    assert [c for c in on.columns if c not in off.columns] == [*expected, "mechanism_seconds"]
    assert list(off.columns) == [c for c in on.columns if c not in (*expected, "mechanism_seconds")]
    assert on[expected].notna().all().all()  # sinusoidal: every ratio is defined
    assert (on.mechanism_seconds > 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["translation", "classification"])
def test_the_trajectory_is_bit_identical_with_the_metrics_on_or_off(runs, kind):
    (on_dir, on_final), (off_dir, off_final) = runs[kind, True], runs[kind, False]
    on = metric_values(on_dir).drop(columns=mechanism_columns(kind))
    pd.testing.assert_frame_equal(on, metric_values(off_dir), check_exact=True)
    ignored = {"training_code": "", "spec_digest": ""}  # the specs differ in train.mechanism alone
    assert selected(on_final | ignored) == selected(off_final | ignored)
    on_state = torch.load(on_dir / "checkpoint.pt", weights_only=True)
    off_state = torch.load(off_dir / "checkpoint.pt", weights_only=True)
    for key, value in off_state["model"].items():
        assert torch.equal(on_state["model"][key], value), key
    assert on_state["rng"]["python"] == off_state["rng"]["python"]
    assert torch.equal(on_state["rng"]["torch"], off_state["rng"]["torch"])
    on_np, off_np = on_state["rng"]["numpy"], off_state["rng"]["numpy"]
    assert torch.equal(on_np[1], off_np[1]) and on_np[::2] == off_np[::2] and on_np[3] == off_np[3]
    assert torch.equal(on_state["sampler"], off_state["sampler"])
    with np.load(on_dir / "embeddings.npz") as a, np.load(off_dir / "embeddings.npz") as b:
        assert all(np.array_equal(a[k], b[k]) for k in b.files)


@pytest.mark.slow
def test_probe_cost_is_reported_beside_the_training_time(runs, capsys):
    """Not an assertion on speed: the cost of the probe on the toy runs, printed for the record (-s)."""
    for (kind, on), (out, _) in runs.items():
        if on:
            m = pd.read_parquet(out / "metrics.parquet")
            share = m.mechanism_seconds.sum() / m.train_seconds.sum()
            print(f"{kind}: probe {m.mechanism_seconds.mean():.3f} s/epoch, train {m.train_seconds.mean():.3f} s/epoch")
            assert 0 < share


# ---- the metrics on hand-made models and data ----


@pytest.fixture(scope="module")
def data(toy):  # noqa: F811
    return {
        "translation": TranslationData(toy / "mt_valid.parquet", max_len=32),
        "classification": ClassificationData(toy / "cls_valid.parquet", max_len=32),
    }


def build(kind, pos_encoding="sinusoidal", trainable=True, seed=0):
    rng = np.random.default_rng(seed)
    emb = [rng.normal(0, 0.3, size=(4 + WORDS, DIM)).astype(np.float32) for _ in range(2)]
    config = ModelConfig(
        heads=2, ffn_dim=32, layers=1, dropout=0.1, pos_encoding=pos_encoding, max_len=32, embedding_trainable=trainable
    )
    torch.manual_seed(seed)
    return Translator(emb[0], emb[1], config) if kind == "translation" else Classifier(emb[0], 3, config)


def side_sentences(kind, data):
    """The ids each side reads, per probe sentence (the decoder's: targets but the last), without padding."""
    if kind == "translation":
        return {"encoder": [s for s in data.src], "decoder": [t[:-1] for t in data.tgt]}
    return {"encoder": list(data.ids)}


@pytest.mark.parametrize("kind", ["translation", "classification"])
def test_sigma_is_the_sample_std_of_each_embedding(kind, data):
    model = build(kind)
    row = mechanism.measure(model, data[kind], 4, DEVICE)
    inputs = {"encoder": model.encoder.input} | ({"decoder": model.decoder_input} if kind == "translation" else {})
    for side, layer in inputs.items():
        assert row[f"sigma_{side}"] == pytest.approx(mean_std(layer.embedding.weight.detach().numpy())[1], rel=1e-12)


@pytest.mark.parametrize("kind", ["translation", "classification"])
@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "learned"])
def test_input_ratio_is_the_scaled_embedding_against_the_position_rows_added(kind, pos_encoding, data):
    model = build(kind, pos_encoding)
    row = mechanism.measure(model, data[kind], 5, DEVICE)
    inputs = {"encoder": model.encoder.input} | ({"decoder": model.decoder_input} if kind == "translation" else {})
    for side, sentences in side_sentences(kind, data[kind]).items():
        layer = inputs[side]
        emb = layer.embedding.weight.detach().double().numpy()
        if pos_encoding == "sinusoidal":
            table = sinusoidal_table(32, DIM, 10000).astype(np.float64)
        else:
            table = layer.position.table.weight.detach().double().numpy()
        x = sum((np.square(emb[ids] * math.sqrt(DIM))).sum() for ids in sentences)
        p = sum(np.square(table[: len(ids)]).sum() for ids in sentences)
        assert row[f"input_ratio_{side}"] == pytest.approx(math.sqrt(x / p), rel=1e-9)


@pytest.mark.parametrize("pos_encoding", ["none", "rotary", "relative"])
def test_input_ratio_is_nan_for_an_encoding_that_adds_nothing(pos_encoding, data):
    from embinit.models.position import POSITION_ENCODINGS

    if pos_encoding not in POSITION_ENCODINGS:
        pytest.skip(f"no {pos_encoding} position encoding in this checkout")
    row = mechanism.measure(build("translation", pos_encoding), data["translation"], 8, DEVICE)
    assert math.isnan(row["input_ratio_encoder"]) and math.isnan(row["input_ratio_decoder"])
    assert not math.isnan(row["entropy_encoder_0"]) and row["grad_norm_other"] > 0


def test_uniform_attention_has_entropy_log_s_and_causal_rows_log_of_their_prefix(data):
    """Zero queries and keys: every row weighs its admissible keys equally."""
    model = build("translation")
    with torch.no_grad():
        for module, _ in mechanism.attention_modules(model).values():
            for linear in (module.query, module.key):
                linear.weight.zero_(), linear.bias.zero_()
    row = mechanism.measure(model, data["translation"], 4, DEVICE)
    sentences = side_sentences("translation", data["translation"])
    src_lengths = [len(s) for s in sentences["encoder"]]
    tgt_lengths = [len(t) for t in sentences["decoder"]]
    # encoder: each of a sentence's S rows has entropy log S; cross: each target row log(source length)
    assert row["entropy_encoder_0"] == pytest.approx(sum(s * math.log(s) for s in src_lengths) / sum(src_lengths))
    cross = sum(t * math.log(s) for s, t in zip(src_lengths, tgt_lengths)) / sum(tgt_lengths)
    assert row["entropy_decoder_cross_0"] == pytest.approx(cross)
    # causal: row t of a target sees t + 1 keys; only its first row is saturated
    causal = sum(math.log(i + 1) for t in tgt_lengths for i in range(t)) / sum(tgt_lengths)
    assert row["entropy_decoder_self_0"] == pytest.approx(causal)
    assert row["saturation_decoder_self_0"] == pytest.approx(len(tgt_lengths) / sum(tgt_lengths))
    assert row["saturation_encoder_0"] == row["saturation_decoder_cross_0"] == 0


def test_entropy_and_saturation_of_constructed_weights():
    one_hot = torch.zeros(2, 3, 4, 5)
    one_hot[..., 1] = 1.0
    real = torch.tensor([[True, True, True, False], [True, True, False, False]])
    assert mechanism.attention_stats(one_hot, real) == (0.0, 3.0 * 5, 3 * 5)
    uniform = torch.full((2, 3, 4, 5), 0.2)
    entropy, saturated, rows = mechanism.attention_stats(uniform, real)
    assert entropy / rows == pytest.approx(math.log(5)) and saturated == 0
    mixed = uniform.clone()
    mixed[0, :, 0] = torch.tensor([0.995, 0.005, 0, 0, 0])  # 3 heads x one row just above the threshold
    mixed[1, :, 3] = one_hot[1, :, 3]  # a pad query row: not counted
    entropy, saturated, rows = mechanism.attention_stats(mixed, real)
    assert saturated == 3 and rows == 15
    head_row = -(0.995 * math.log(0.995) + 0.005 * math.log(0.005))
    assert entropy == pytest.approx(3 * head_row + 12 * math.log(5))


def test_attention_modules_are_named_by_stack_kind_and_layer():
    config = ModelConfig(heads=2, ffn_dim=8, layers=2, max_len=8)
    emb = np.zeros((6, 4), dtype=np.float32)
    assert list(mechanism.attention_modules(Translator(emb, emb, config))) == [
        "encoder_0",
        "encoder_1",
        "decoder_self_0",
        "decoder_cross_0",
        "decoder_self_1",
        "decoder_cross_1",
    ]
    assert list(mechanism.attention_modules(Classifier(emb, 2, config))) == ["encoder_0", "encoder_1"]


@pytest.mark.parametrize("kind", ["translation", "classification"])
def test_frozen_embedding_has_no_gradient_norm(kind, data):
    frozen = mechanism.measure(build(kind, trainable=False), data[kind], 4, DEVICE)
    trainable = mechanism.measure(build(kind, trainable=True), data[kind], 4, DEVICE)
    assert frozen["grad_norm_embedding"] == 0.0 and frozen["grad_norm_other"] > 0
    assert trainable["grad_norm_embedding"] > 0
    assert trainable["grad_norm_other"] == pytest.approx(frozen["grad_norm_other"], rel=1e-5)  # same weights


def test_gradient_norms_are_those_of_the_probes_mean_loss(data):
    model = build("translation")
    row = mechanism.measure(model, data["translation"], 5, DEVICE, probe=12)
    model.eval()
    batch = data["translation"].batch(np.arange(12))  # one batch: the same mean loss
    loss = model.loss(*batch) / model.loss_terms(batch[1])
    loss.backward()
    embedding = [model.encoder.input.embedding.weight, model.decoder_input.embedding.weight]
    norm = lambda ps: math.sqrt(sum(float(p.grad.double().square().sum()) for p in ps))  # noqa: E731
    others = [p for p in model.parameters() if p.grad is not None and all(p is not e for e in embedding)]
    assert row["grad_norm_embedding"] == pytest.approx(norm(embedding), rel=1e-4)
    assert row["grad_norm_other"] == pytest.approx(norm(others), rel=1e-4)


def test_measuring_leaves_weights_gradients_sinks_and_rngs_as_they_were(data):
    model = build("translation")
    model.train()
    held = {name: torch.full_like(p, 0.5) for name, p in model.named_parameters()}
    for name, p in model.named_parameters():
        p.grad = held[name]
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    rngs = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    mechanism.measure(model, data["translation"], 4, DEVICE)
    assert torch.equal(torch.get_rng_state(), rngs[0]) and np.array_equal(np.random.get_state()[1], rngs[1])
    assert random.getstate() == rngs[2]
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())
    assert all(p.grad is held[name] for name, p in model.named_parameters())
    assert all(m.weights_sink is None for m, _ in mechanism.attention_modules(model).values())


def test_probe_is_the_first_sentences_in_evaluation_batches(data):
    batches = mechanism.probe_batches(data["translation"], 10, 4)
    assert sorted(np.concatenate(batches).tolist()) == list(range(10))
    lengths = data["translation"].lengths()[np.concatenate(batches), 0]
    assert list(lengths) == sorted(lengths)
    assert len(np.concatenate(mechanism.probe_batches(data["translation"], 1000, 4))) == 16
    assert mechanism.probe_size({}) == mechanism.PROBE == 256 and mechanism.enabled({})
    assert not mechanism.enabled({"mechanism": False})
