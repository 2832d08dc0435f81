import importlib.util
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, SHARED_DATA, needs_shared
from embinit.training.batching import TranslationData, pad
from embinit.models.config import heads_for
from closed_forms import classifier_parameters, translator_parameters
from embinit.models import Classifier, ModelConfig, Translator
from embinit.layers.position_table import sinusoidal_table
from embinit.models.position import RelativeBias
from embinit.data.vocab import BOS, EOS, PAD

SMALL = dict(heads=2, ffn_dim=24, layers=2, dropout=0.1, max_len=32)
ENCODINGS = ["sinusoidal", "learned", "none", "rotary", "relative"]


def matrix(n, dim, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


@pytest.mark.parametrize("output_embedding", ["untied", "tied", "initialized"])
@pytest.mark.parametrize("pos_encoding", ENCODINGS)
def test_parameter_counts_match_closed_forms(pos_encoding, output_embedding):
    config = ModelConfig(pos_encoding=pos_encoding, output_embedding=output_embedding, **SMALL)
    model = Translator(matrix(30, 16), matrix(20, 16), config)
    assert model.num_parameters() == translator_parameters(
        30,
        20,
        16,
        ffn_dim=24,
        layers=2,
        pos_encoding=pos_encoding,
        max_len=32,
        heads=2,
        output_embedding=output_embedding,
    )
    if output_embedding == "untied":
        model = Classifier(matrix(30, 16), 3, ModelConfig(pos_encoding=pos_encoding, **SMALL))
        assert model.num_parameters() == classifier_parameters(
            30, 16, 3, ffn_dim=24, layers=2, pos_encoding=pos_encoding, max_len=32, heads=2
        )


def test_multi30k_glove_translator_has_about_11m_parameters():
    heads = heads_for({"heads": 8, "heads_by_dim": {300: 10}}, 300)
    assert heads == 10
    model = Translator(matrix(7853, 300), matrix(5893, 300), ModelConfig(heads=heads, ffn_dim=512, layers=3))
    count = model.num_parameters()
    # the recipe's nn.Transformer: the two stacks' final LayerNorms add 4 x 300 to the first model's 11,005,465
    assert count == translator_parameters(7853, 5893, 300) == 11_006_665
    assert abs(count - 11.0e6) <= 0.03 * 11.0e6
    legacy = Translator(matrix(7853, 300), matrix(5893, 300), ModelConfig(heads=10, init="legacy", final_norm=False))
    assert legacy.num_parameters() == translator_parameters(7853, 5893, 300, final_norm=False) == 11_005_465


def test_legacy_weights_are_xavier_with_zero_biases_and_embeddings_are_copied():
    emb = matrix(30, 16)
    model = Translator(emb, matrix(20, 16), ModelConfig(pos_encoding="sinusoidal", init="legacy", **SMALL))
    assert torch.equal(model.encoder.input.embedding.weight, torch.from_numpy(emb))
    weight = model.encoder.layers[0].ffn[0].weight  # Linear(16, 24)
    assert weight.abs().max() <= np.sqrt(6 / (16 + 24))
    assert torch.count_nonzero(model.encoder.layers[0].ffn[0].bias) == 0
    query = model.encoder.layers[0].attention.query.weight  # its own 16 x 16 draw
    assert query.abs().max() > np.sqrt(6 / (4 * 16))
    assert torch.equal(model.encoder.input.position.table, torch.from_numpy(sinusoidal_table(32, 16)))


def test_sinusoidal_table_layout():
    table = sinusoidal_table(5, 6, base=10000)
    assert table.dtype == np.float32 and table.shape == (5, 6)
    pos, i = 3, 1
    assert table[pos, 2 * i] == pytest.approx(np.sin(pos / 10000 ** (2 * i / 6)))
    assert table[pos, 2 * i + 1] == pytest.approx(np.cos(pos / 10000 ** (2 * i / 6)))


def test_without_position_encoding_the_encoder_is_permutation_equivariant():
    torch.manual_seed(0)
    ids = torch.randint(4, 30, (3, 9))
    perm = torch.randperm(9)
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding="none", **SMALL)).eval()
    out, _ = model.encode(ids)
    out_perm, _ = model.encode(ids[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm])
    model = Classifier(matrix(30, 16), 3, ModelConfig(pos_encoding="none", **SMALL)).eval()
    torch.testing.assert_close(model(ids[:, perm]), model(ids))  # mean pooling: invariant
    with_pos = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding="sinusoidal", **SMALL)).eval()
    assert not torch.allclose(with_pos.encode(ids[:, perm])[0], with_pos.encode(ids)[0][:, perm])


def test_padding_does_not_change_real_positions():
    torch.manual_seed(0)
    src = torch.randint(4, 30, (1, 6))
    tgt = torch.randint(4, 20, (1, 5))
    padded_src = torch.cat([src, torch.ones(1, 3, dtype=torch.long)], 1)
    padded_tgt = torch.cat([tgt, torch.ones(1, 2, dtype=torch.long)], 1)
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(**SMALL)).eval()
    torch.testing.assert_close(model(padded_src, padded_tgt)[:, :5], model(src, tgt))
    model = Classifier(matrix(30, 16), 3, ModelConfig(**SMALL)).eval()
    torch.testing.assert_close(model(padded_src), model(src))


def test_decoder_is_causal():
    torch.manual_seed(0)
    src = torch.randint(4, 30, (2, 6))
    tgt = torch.randint(4, 20, (2, 5))
    changed = tgt.clone()
    changed[:, 3:] = 5
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(**SMALL)).eval()
    torch.testing.assert_close(model(src, changed)[:, :3], model(src, tgt)[:, :3])


def test_frozen_embedding_has_no_gradient():
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(embedding_trainable=False, **SMALL))
    assert not model.encoder.input.embedding.weight.requires_grad
    assert not model.decoder_input.embedding.weight.requires_grad
    assert model.output.weight.requires_grad


@pytest.mark.parametrize("trainable, encoder, decoder", [("encoder", True, False), ("decoder", False, True)])
def test_one_side_frozen_freezes_only_that_sides_embedding(trainable, encoder, decoder):
    model = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(embedding_trainable=trainable, **SMALL))
    assert model.encoder.input.embedding.weight.requires_grad is encoder
    assert model.decoder_input.embedding.weight.requires_grad is decoder
    with pytest.raises(ValueError, match="the classifier has none"):
        Classifier(matrix(30, 16), 2, ModelConfig(embedding_trainable="decoder", **SMALL))
    with pytest.raises(ValueError, match="embedding_trainable must be one of"):
        ModelConfig(embedding_trainable="both", **SMALL)


def test_cpu_dropout_drops_p_and_keeps_the_mean_in_training_only():
    from embinit.models.layers import Dropout

    x = torch.ones(400, 500)
    layer = Dropout(0.1).train()
    y = layer(x)
    assert abs((y == 0).float().mean().item() - 0.1) < 0.005
    assert abs(y.mean().item() - 1.0) < 0.01
    assert torch.equal(layer.eval()(x), x)


def _uncached_generate():
    """The decoder before the key/value cache, kept as the baseline in bench/decode.py."""
    spec = importlib.util.spec_from_file_location("bench_decode", REPO / "bench" / "decode.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(REPO / "bench"))  # decode.py imports its sibling train_throughput
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "bench"))
    return module.uncached_generate


def _sources(rng, n, vocab):
    lengths = rng.integers(3, 12, size=n)
    src = torch.full((n, lengths.max() + 2), PAD)
    for row, length in enumerate(lengths):
        src[row, : length + 2] = torch.tensor([BOS, *rng.integers(4, vocab, size=length), EOS])
    return src


def _random_relative_tables(model):
    """Relative tables start at zero (the `none` model); random ones make the cache's bias rows matter."""
    for module in model.modules():
        if isinstance(module, RelativeBias):
            torch.nn.init.normal_(module.table)
    return model


@pytest.mark.parametrize("pos_encoding", ENCODINGS)
@pytest.mark.parametrize("seed", [0, 1])
def test_cached_generate_equals_the_uncached_decoder_on_random_models(pos_encoding, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Translator(matrix(40, 16, seed), matrix(30, 16, seed + 1), ModelConfig(pos_encoding=pos_encoding, **SMALL))
    model = _random_relative_tables(model).eval()
    src = _sources(rng, 9, 40)
    cached = model.generate(src, max_extra=5)
    assert torch.equal(cached, _uncached_generate()(model, src, max_extra=5))
    assert cached.size(1) <= int((src != PAD).sum(1).max()) + 5


@pytest.mark.parametrize("pos_encoding", ["rotary", "relative"])
@pytest.mark.parametrize("seed", [0, 1])
def test_cached_generate_equals_the_uncached_decoder_with_odd_head_widths(pos_encoding, seed):
    """D = 15 with 3 heads: width 5, rotary leaves each head's last dimension unrotated (as D = 50, 10 heads);
    float64, so that only the logic, not rounding, can make the two differ."""
    torch.manual_seed(seed)
    config = ModelConfig(pos_encoding=pos_encoding, heads=3, ffn_dim=24, layers=2, dropout=0.1, max_len=32)
    model = _random_relative_tables(Translator(matrix(40, 15, seed), matrix(30, 15, seed + 1), config))
    model = model.eval().double()
    src = _sources(np.random.default_rng(seed), 9, 40)
    assert torch.equal(model.generate(src, max_extra=5), _uncached_generate()(model, src, max_extra=5))


def test_generate_stops_at_eos_and_pads_finished_sentences():
    model = Translator(matrix(40, 16), matrix(30, 16), ModelConfig(**SMALL)).eval()
    with torch.no_grad():
        model.output.bias.fill_(-1e4)
        model.output.bias[EOS] = 1e4  # every sentence ends at once
    out = model.generate(_sources(np.random.default_rng(0), 4, 40), max_extra=5)
    assert out.tolist() == [[EOS]] * 4


@pytest.mark.slow
@needs_shared
def test_cached_generate_equals_the_uncached_decoder_on_real_multi30k_ids(tmp_path):
    """Real German sentences (Multi30k val) as ids of their own spaCy vocabulary, a D = 300 model."""
    from embinit.data.prepare import prepare
    from embinit.data.vocab import build, load_tokenizer

    raw = SHARED_DATA / "multi30k" / "task1" / "raw"
    files = {
        f"{split}_{side}": raw / f"val.{lang}.gz"
        for split in ("train", "valid", "test")
        for side, lang in (("src", "de"), ("tgt", "en"))
    }
    splits = {s: str(tmp_path / f"{s}.parquet") for s in ("train", "valid", "test")}
    prepare("multi30k", files, splits)
    tokenized = {s: str(tmp_path / f"ids_{s}.parquet") for s in splits}
    sizes = build(
        "translation",
        splits,
        {"encoder": load_tokenizer("spacy", "de"), "decoder": load_tokenizer("spacy", "en")},
        2,
        {side: str(tmp_path / f"v_{side}.parquet") for side in ("encoder", "decoder")},
        tokenized,
    )
    data = TranslationData(tokenized["valid"], max_len=256)
    src = pad(data.src[:24])
    torch.manual_seed(0)
    model = Translator(
        matrix(sizes["encoder"], 300), matrix(sizes["decoder"], 300) * 0.05, ModelConfig(heads=10)
    ).eval()
    # float64: an untrained model's logits nearly tie, and fp32 rounding (other matrix shapes in the two decoders)
    # can flip an argmax on some CPUs (bench/decode.py saw 1 of 1,014 sentences); the logic must agree exactly
    model = model.double()
    assert torch.equal(model.generate(src, max_extra=10), _uncached_generate()(model, src, max_extra=10))


def test_a_position_encoding_is_one_registered_class_and_one_config_value(monkeypatch):
    """Adding one: a @register class in embinit.models.position; the config check and the models accept it."""
    from conftest import load_default_config
    from embinit.workflow.checks import check
    from embinit.workflow.config import ConfigError
    from embinit.models import position

    class Constant(position.PositionEncoding):
        def embed(self, x, start=0):
            return x + 1.0

    monkeypatch.setitem(position.POSITION_ENCODINGS, "constant", Constant)  # what @position.register does
    config = load_default_config()
    config["variants"]["shifted"] = {"pos_encoding": "constant", "embedding_trainable": True}
    check(config)
    model = Classifier(matrix(30, 16), 3, ModelConfig(pos_encoding="constant", dropout=0.0, heads=2)).eval()
    ids = torch.tensor([[BOS, 5, 6, EOS]])
    expected = model.encoder.input.embedding(ids) * 4.0 + 1.0
    assert torch.equal(model.encoder.input(ids), expected)
    translator = Translator(matrix(30, 16), matrix(20, 16), ModelConfig(pos_encoding="constant", **SMALL)).eval()
    assert translator.generate(ids, max_extra=3).size(0) == 1
    config["variants"]["shifted"]["pos_encoding"] = "rotery"
    with pytest.raises(ConfigError, match="variants.shifted.pos_encoding: unknown name 'rotery'"):
        check(config)
