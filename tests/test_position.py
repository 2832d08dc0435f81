"""Position encodings inside attention (rotary, relative), the output-embedding coupling, the weights sink."""

import numpy as np
import pytest
import torch

from closed_forms import translator_parameters
from embinit.data.vocab import BOS, PAD
from embinit.models import Classifier, ModelConfig, Translator
from embinit.models.layers import MultiHeadAttention
from embinit.models.position import RelativeBias, Rotary

SMALL = dict(heads=2, ffn_dim=24, layers=2, dropout=0.1, max_len=32)


def matrix(n, dim, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def randomize_relative(model):
    """Relative tables start at zero (no position information); give them something to say."""
    gen = torch.Generator().manual_seed(7)
    for module in model.modules():
        if isinstance(module, RelativeBias):
            with torch.no_grad():
                module.table.copy_(torch.randn(module.table.shape, generator=gen))
    return model


def ids(seed, batch, length, vocab):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (batch, length), generator=gen)


# --- the hooks ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim, heads", [(16, 2), (15, 3)])  # head width 8, and 5 (odd: one dim unrotated)
def test_rotary_scores_depend_on_relative_position_only(dim, heads):
    rotary = Rotary(dim, ModelConfig(heads=heads, max_len=64), causal=False)
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 2, heads, 6, dim // heads, generator=gen)
    scores = rotary.rotate(q, 0) @ rotary.rotate(k, 0).transpose(-2, -1)  # positions 0..5 against 0..5
    assert not torch.allclose(scores, q @ k.transpose(-2, -1))
    for shift in (1, 9, 58):
        shifted = rotary.rotate(q, shift) @ rotary.rotate(k, shift).transpose(-2, -1)
        torch.testing.assert_close(shifted, scores, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rotary.rotate(q, 3).norm(dim=-1), q.norm(dim=-1))  # a rotation
    if dim // heads % 2:
        assert torch.equal(rotary.rotate(q, 3)[..., -1], q[..., -1])


def test_rotary_turns_dimension_pairs_by_position_times_rate():
    rotary = Rotary(12, ModelConfig(heads=2, pos_base=100.0), causal=False)  # head width 6: 3 pairs
    t = torch.zeros(1, 1, 1, 6)
    t[..., 2] = 1.0  # pair i = 1
    turned = rotary.rotate(t, 5)[0, 0, 0]
    angle = 5 * 100.0 ** (-2 / 6)
    torch.testing.assert_close(turned[2:4], torch.tensor([np.cos(angle), np.sin(angle)], dtype=torch.float32))
    assert torch.equal(turned[[0, 1, 4, 5]], torch.zeros(4))


@pytest.mark.parametrize("causal", [False, True])
def test_relative_bias_depends_on_relative_position_only(causal):
    relative = randomize_relative(RelativeBias(16, ModelConfig(heads=2), causal))
    full = relative.bias(0, 7, 7)  # (heads, T, S)
    assert full.shape == (2, 7, 7)
    for shift in (1, 9, 200):  # queries and keys shift..shift + 6: the last 7 of keys 0..shift + 6
        torch.testing.assert_close(relative.bias(shift, 7, shift + 7)[..., shift:], full)
    for p in range(7):  # incremental decoding: the query at p against keys 0..p is the full pass's row p
        torch.testing.assert_close(relative.bias(p, 1, p + 1), full[:, p : p + 1, : p + 1])


def test_relative_buckets_are_t5s():
    """T5's scheme (Raffel et al. 2020; HF T5Attention._relative_position_bucket), 32 buckets, max distance 128:
    bidirectional = 16 buckets per direction, exact below 8, log-spaced to 128, keys after the query + 16;
    causal = 32 buckets for the past, exact below 16, everything ahead in bucket 0."""
    distance = torch.tensor([0, 1, -1, 7, -7, 8, -8, 12, -12, 127, -127, 128, -128, 300, -300])  # key - query
    bidirectional = [0, 17, 1, 23, 7, 24, 8, 25, 9, 31, 15, 31, 15, 31, 15]  # 12: 8 + floor(8 log(12/8) / log 16)
    causal = [0, 0, 1, 0, 7, 0, 8, 0, 12, 0, 31, 0, 31, 0, 31]
    assert RelativeBias(16, ModelConfig(heads=2), causal=False).bucket(distance).tolist() == bidirectional
    assert RelativeBias(16, ModelConfig(heads=2), causal=True).bucket(distance).tolist() == causal
    assert RelativeBias(16, ModelConfig(heads=2), causal=True).bucket(torch.arange(0, -16, -1)).tolist() == list(
        range(16)
    )  # the decoder's first half: exact distances back


def test_a_stack_shares_one_relative_table_and_it_starts_at_zero():
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding="relative", **SMALL))
    tables = [n for n, _ in model.named_parameters() if "position" in n]
    assert tables == ["encoder.input.position.table", "decoder_input.position.table"]
    assert model.encoder.input.position.table.shape == (32, 2)
    assert not model.encoder.input.position.causal and model.decoder_input.position.causal
    assert torch.count_nonzero(model.decoder_input.position.table) == 0


def test_a_zero_relative_table_is_no_position_information():
    """Nothing is added to the embedding and the table starts at zero: at its start a relative model is the
    `none` model, weight for weight (neither table nor rotary draws random numbers)."""
    models = {}
    for pos_encoding in ("relative", "rotary", "none"):
        torch.manual_seed(0)
        config = ModelConfig(pos_encoding=pos_encoding, **SMALL)
        models[pos_encoding] = Translator(matrix(30, 16), matrix(20, 16), config).eval()
    for pos_encoding in ("relative", "rotary"):
        state = {k: v for k, v in models[pos_encoding].state_dict().items() if not k.endswith("position.table")}
        assert state.keys() == models["none"].state_dict().keys()
        assert all(torch.equal(v, models["none"].state_dict()[k]) for k, v in state.items())
    src, tgt = ids(0, 2, 7, 30), ids(1, 2, 5, 20)
    torch.testing.assert_close(models["relative"](src, tgt), models["none"](src, tgt))
    assert not torch.allclose(models["rotary"](src, tgt), models["none"](src, tgt))


@pytest.mark.parametrize("pos_encoding", ["rotary", "relative"])
def test_cross_attention_has_no_position_effect(pos_encoding):
    """The decoder's states do not change when the encoder memory is permuted (with its padding mask)."""
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding=pos_encoding, **SMALL))
    model = randomize_relative(model).eval()
    src, tgt = ids(0, 2, 7, 30), ids(1, 2, 5, 20)
    src[0, 4:] = PAD
    memory, keep = model.encode(src)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(
        model.decode(tgt, memory[:, perm], keep[..., perm]), model.decode(tgt, memory, keep), rtol=1e-5, atol=1e-5
    )


# --- models ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pos_encoding", ["rotary", "relative"])
def test_inside_attention_encodings_break_permutation_equivariance(pos_encoding):
    torch.manual_seed(0)
    x = ids(0, 3, 9, 30)
    perm = torch.randperm(9)
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding=pos_encoding, **SMALL))
    model = randomize_relative(model).eval()
    assert not torch.allclose(model.encode(x[:, perm])[0], model.encode(x)[0][:, perm], atol=1e-3)
    model = randomize_relative(Classifier(matrix(30, 16), 3, ModelConfig(pos_encoding=pos_encoding, **SMALL))).eval()
    assert not torch.allclose(model(x[:, perm]), model(x), atol=1e-3)


@pytest.mark.parametrize("pos_encoding", ["rotary", "relative"])
def test_sdpa_and_the_explicit_path_agree_with_rotation_and_bias(pos_encoding):
    """Eval runs SDPA (the bias as a float mask with the padding and causal masks); a weights sink switches
    every attention to the explicit path, which must give the same outputs."""
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding=pos_encoding, **SMALL))
    model = randomize_relative(model).eval()
    src, tgt = ids(0, 3, 8, 30), ids(1, 3, 6, 20)
    src[0, 5:] = PAD
    expected = model(src, tgt)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.weights_sink = []
    torch.testing.assert_close(model(src, tgt), expected)


@pytest.mark.parametrize("pos_encoding", ["rotary", "relative"])
def test_training_step_with_dropout_runs_and_the_relative_table_learns(pos_encoding):
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding=pos_encoding, **SMALL)).train()
    src, tgt = ids(0, 3, 8, 30), ids(1, 3, 6, 20)
    tgt[:, 0] = BOS
    model.loss(src, tgt).backward()
    if pos_encoding == "relative":
        for stack in (model.encoder.input, model.decoder_input):
            assert stack.position.table.grad.abs().sum() > 0


# --- existing encodings: the numbers of the code before rotary and relative ---------------------------------

# Recorded from the commit before the change (bd81cc6): Translator then Classifier built after
# torch.manual_seed(0) with SMALL; eval logits; then, in training mode after torch.manual_seed(5), the
# translator's loss and the classifier's (the dropout draws in that order).
BEFORE = {
    "sinusoidal": (
        -51.43133544921875,
        498.8822021484375,
        [1.28624833, -0.11762314, -0.74984884],
        69.18694305,
        1.70855522,
    ),
    "learned": (55.46166229248047, 523.296142578125, [1.25652373, -0.89638031, -0.12473099], 75.91886902, 2.94213104),
    "none": (-21.77506446838379, 499.8222351074219, [0.87351668, -0.20999973, -0.27643260], 70.65395355, 1.92755067),
}


@pytest.mark.parametrize("pos_encoding", sorted(BEFORE))
def test_existing_encodings_give_the_numbers_they_gave_before(pos_encoding):
    total, absolute, first, translator_loss, classifier_loss = BEFORE[pos_encoding]
    # the numbers of the first model (issue 40 made the recipe's the default: init, final LayerNorms)
    config = ModelConfig(pos_encoding=pos_encoding, init="legacy", final_norm=False, **SMALL)
    torch.manual_seed(0)
    translator = Translator(matrix(40, 16), matrix(30, 16, 1), config).eval()
    classifier = Classifier(matrix(40, 16), 3, config).eval()
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(4, 40, (3, 9), generator=gen)
    src[0, 7:] = PAD
    tgt = torch.randint(4, 30, (3, 8), generator=gen)
    tgt[:, 0] = BOS
    tgt[1, 6:] = PAD
    with torch.no_grad():
        logits = translator(src, tgt)
    torch.testing.assert_close(logits.sum().item(), total, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(logits.abs().sum().item(), absolute, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(logits[0, 0, :3], torch.tensor(first), rtol=1e-5, atol=1e-5)
    translator.train(), classifier.train()
    torch.manual_seed(5)
    torch.testing.assert_close(translator.loss(src, tgt).item(), translator_loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        classifier.loss(src, torch.tensor([0, 1, 2])).item(), classifier_loss, rtol=1e-5, atol=1e-5
    )


# --- output-embedding coupling -----------------------------------------------------------------------------


def step(model, seed=0):
    """One Adam step on the translation loss."""
    src, tgt = ids(seed, 4, 7, 30), ids(seed + 1, 4, 6, 20)
    tgt[:, 0] = BOS
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.loss(src, tgt).backward()
    optimizer.step()
    return tgt


def test_tied_output_is_the_decoder_embedding_and_is_trained_by_the_output_loss():
    tgt_embedding = matrix(20, 16, 1)
    model = Translator(matrix(30, 16), tgt_embedding, ModelConfig(output_embedding="tied", **SMALL))
    assert model.output.weight is model.decoder_input.embedding.weight
    assert torch.equal(model.output.weight, torch.from_numpy(tgt_embedding))  # not Xavier-overwritten
    assert model.output.bias.abs().max() <= 16**-0.5  # nn.Linear's own bias, as the recipe leaves it
    assert (
        model.num_parameters() == translator_parameters(30, 20, 16, ffn_dim=24, layers=2, max_len=32, heads=2) - 20 * 16
    )
    assert model.num_parameters() == translator_parameters(
        30, 20, 16, ffn_dim=24, layers=2, max_len=32, heads=2, output_embedding="tied"
    )
    tgt = step(model)
    # rows of tokens never fed to the decoder learn through the output loss alone (the softmax reaches every row)
    unseen = sorted(set(range(20)) - set(tgt[:, :-1].flatten().tolist()))
    assert unseen
    changed = model.decoder_input.embedding.weight[unseen] != torch.from_numpy(tgt_embedding[unseen])
    assert changed.all(dim=1).all()
    untied = Translator(matrix(30, 16), tgt_embedding, ModelConfig(**SMALL))
    step(untied)
    assert torch.equal(untied.decoder_input.embedding.weight[unseen], torch.from_numpy(tgt_embedding[unseen]))


def test_a_frozen_tied_embedding_freezes_the_output_projection():
    model = Translator(
        matrix(30, 16), matrix(20, 16), ModelConfig(output_embedding="tied", embedding_trainable=False, **SMALL)
    )
    assert not model.output.weight.requires_grad and model.output.bias.requires_grad


def test_initialized_output_starts_as_a_copy_of_the_decoder_embedding_and_trains_on_its_own():
    tgt_embedding = matrix(20, 16, 1)
    model = Translator(matrix(30, 16), tgt_embedding, ModelConfig(output_embedding="initialized", **SMALL))
    assert model.output.weight is not model.decoder_input.embedding.weight
    assert torch.equal(model.output.weight, torch.from_numpy(tgt_embedding))
    assert model.num_parameters() == translator_parameters(30, 20, 16, ffn_dim=24, layers=2, max_len=32, heads=2)
    step(model)
    assert not torch.equal(model.output.weight, model.decoder_input.embedding.weight)
    assert not torch.equal(model.output.weight, torch.from_numpy(tgt_embedding))


def test_coupling_changes_only_the_output_weight():
    """For one seed every other weight is untied's: a comparison of couplings compares only the coupling."""
    states = {}
    for coupling in ("untied", "tied", "initialized"):
        torch.manual_seed(0)
        states[coupling] = Translator(
            matrix(30, 16), matrix(20, 16, 1), ModelConfig(output_embedding=coupling, **SMALL)
        ).state_dict()
    for coupling in ("tied", "initialized"):
        assert states[coupling].keys() == states["untied"].keys()
        for name, value in states["untied"].items():
            if name != "output.weight":
                assert torch.equal(states[coupling][name], value), name


def test_output_embedding_values_are_checked():
    with pytest.raises(ValueError, match="output_embedding must be one of"):
        ModelConfig(output_embedding="shared")
    for coupling in ("tied", "initialized"):
        with pytest.raises(ValueError, match="classifier"):
            Classifier(matrix(30, 16), 3, ModelConfig(output_embedding=coupling, **SMALL))
    model = {"heads": 8, "heads_by_dim": {}, "ffn_dim": 24, "layers": 1, "dropout": 0.1, "pos_base": 1e4, "max_len": 32}
    model.update(init="recipe", final_norm=True)
    variant = {"pos_encoding": "rotary", "embedding_trainable": True}
    assert ModelConfig.from_config(model, variant, 16).output_embedding == "untied"
    assert ModelConfig.from_config(model, {**variant, "output_embedding": "tied"}, 16).output_embedding == "tied"


# --- attention weights sink --------------------------------------------------------------------------------


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rotary", "relative"])
def test_the_weights_sink_receives_softmax_weights_with_masked_keys_at_zero(pos_encoding):
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding=pos_encoding, **SMALL))
    model = randomize_relative(model).eval()
    assert model.encoder.layers[0].attention.weights_sink is None
    src, tgt = ids(0, 3, 8, 30), ids(1, 3, 6, 20)
    src[0, 5:] = PAD
    encoder, decoder, cross = [], [], []
    model.encoder.layers[1].attention.weights_sink = encoder
    model.decoder[0].self_attention.weights_sink = decoder
    model.decoder[0].cross_attention.weights_sink = cross
    model(src, tgt)
    (enc,), (dec,), (crs,) = encoder, decoder, cross
    assert enc.shape == (3, 2, 8, 8) and dec.shape == (3, 2, 6, 6) and crs.shape == (3, 2, 6, 8)
    for weights in (enc, dec, crs):
        assert not weights.requires_grad
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    assert torch.all(enc[0, ..., 5:] == 0) and torch.all(crs[0, ..., 5:] == 0)  # padding
    assert torch.all(dec[..., torch.ones(6, 6, dtype=torch.bool).triu(1)] == 0)  # the future
    assert torch.all(enc[1:] > 0)


@pytest.mark.parametrize("pos_encoding", ["rotary", "relative"])
def test_bf16_autocast_step_and_decoding_run_on_the_cpu(pos_encoding):
    """The CUDA mixed-precision path through CPU autocast: rotation and bias must keep q, k and the mask in
    the attention's dtype."""
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding=pos_encoding, **SMALL))
    model = randomize_relative(model)
    src, tgt = ids(0, 3, 8, 30), ids(1, 3, 6, 20)
    tgt[:, 0] = BOS
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model.loss(src, tgt)
        model.eval()
        eval_loss = model.loss(src, tgt)  # SDPA with the float mask
        generated = model.generate(src, max_extra=3)
    assert torch.isfinite(loss) and torch.isfinite(eval_loss) and generated.dtype == torch.long
    loss.backward()
