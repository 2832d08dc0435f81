import inspect
import math
import typing

import numpy as np
import pandas as pd
import pytest
import torch

from embinit.layers import initializers as ini
from embinit.layers.initializers import display_name, fingerprint, initialize, initialize_file, mean_std, xavier

SHAPE = (200, 30)


@pytest.fixture
def pretrained():
    """A stand-in pre-trained matrix with GloVe-like non-zero mean and large spread."""
    return np.random.default_rng(123).normal(0.3, 2.0, size=SHAPE).astype(np.float32)


def test_xavier_matches_torch_bound():
    weight = torch.empty(SHAPE)
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(weight)
    a = math.sqrt(6.0 / (fan_in + fan_out))
    assert ini.xavier_bound(*SHAPE) == a
    x = initialize("Xavier", None, SHAPE, seed=0)
    assert x.dtype == np.float32 and x.shape == SHAPE
    assert np.abs(x).max() <= a * (1 + 1e-6)
    assert abs(x.std() - a / math.sqrt(3)) < 0.02 * a
    assert np.abs(torch.nn.init.xavier_uniform_(weight).numpy()).max() <= a * (1 + 1e-6)


def test_pretrained_is_a_copy(pretrained):
    x = initialize("Pretrained", pretrained, SHAPE, seed=0)
    np.testing.assert_array_equal(x, pretrained)
    assert x is not pretrained


def test_pretrained_xavier_has_xavier_sigma_and_is_affine(pretrained):
    x = ini.pretrained_xavier(pretrained, SHAPE, np.random.default_rng(7))
    _, sigma_x = mean_std(xavier(None, SHAPE, np.random.default_rng(7)))  # the draw it used
    mean, sigma = mean_std(x)
    assert x.dtype == np.float32
    assert sigma == pytest.approx(sigma_x, rel=1e-6)
    assert abs(mean) < 1e-6 * sigma
    p = pretrained.ravel().astype(np.float64)
    (slope, _), residual, *_ = np.polyfit(p, x.ravel().astype(np.float64), 1, full=True)
    assert slope == pytest.approx(sigma_x / mean_std(pretrained)[1], rel=1e-6)
    assert residual[0] / (x.size * sigma**2) < 1e-12


def test_xavier_pretrained_has_pretrained_mean_and_sigma(pretrained):
    x = initialize("Xavier_Pretrained", pretrained, SHAPE, seed=1)
    mean_p, sigma_p = mean_std(pretrained)
    mean, sigma = mean_std(x)
    assert mean == pytest.approx(mean_p, rel=1e-5) and sigma == pytest.approx(sigma_p, rel=1e-6)
    assert abs(np.corrcoef(x.ravel(), pretrained.ravel())[0, 1]) < 0.05  # noise, not the pre-trained values


@pytest.mark.parametrize("mode", ["rows_columns", "elements"])
def test_shuffled_keeps_the_values(pretrained, mode):
    x = initialize("Pretrained_Shuffled", pretrained, SHAPE, seed=2, params={"mode": mode})
    np.testing.assert_array_equal(np.sort(x, axis=None), np.sort(pretrained, axis=None))
    assert not np.array_equal(x, pretrained)
    if mode == "rows_columns":  # every row is some pre-trained row, its entries permuted the same way
        assert sorted(map(tuple, np.sort(x, axis=1))) == sorted(map(tuple, np.sort(pretrained, axis=1)))


def test_shuffled_unknown_mode(pretrained):
    with pytest.raises(ValueError, match="unknown mode 'cols'; allowed: rows_columns, elements"):
        initialize("Pretrained_Shuffled", pretrained, SHAPE, seed=0, params={"mode": "cols"})


@pytest.mark.parametrize("name", list(ini.INITIALIZERS))
def test_side_without_source_gets_xavier(name):
    np.testing.assert_array_equal(initialize(name, None, SHAPE, seed=5), initialize("Xavier", None, SHAPE, seed=5))


def test_unknown_initializer_lists_allowed(pretrained):
    with pytest.raises(ValueError, match="unknown initializer 'He'; allowed: Xavier, Pretrained, Pretrained_Xavier"):
        initialize("He", pretrained, SHAPE, seed=0)
    with pytest.raises(ValueError, match="unknown initializer"):
        fingerprint("He", {})


def test_shape_mismatch(pretrained):
    with pytest.raises(ValueError, match=r"pre-trained matrix is \(200, 30\), expected \(201, 30\)"):
        initialize("Pretrained", pretrained, (201, 30), seed=0)


@pytest.mark.parametrize("name", list(ini.INITIALIZERS))
def test_files_same_seed_identical_other_seed_or_side_different(tmp_path, pretrained, name):
    vocab = tmp_path / "vocab.parquet"
    pd.DataFrame({"index": range(SHAPE[0])}).to_parquet(vocab)
    np.save(tmp_path / "pretrained.npy", pretrained)

    def write(out, seed, side="encoder"):
        initialize_file(
            name, str(tmp_path / "pretrained.npy"), str(vocab), SHAPE[1], seed, {}, str(tmp_path / out), side=side
        )
        return (tmp_path / out).read_bytes()

    a, b, c, d = write("a.npy", 0), write("b.npy", 0), write("c.npy", 1), write("d.npy", 0, "decoder")
    assert a == b
    assert (a == c) == (a == d) == (name == "Pretrained")
    assert np.load(tmp_path / "a.npy").shape == SHAPE


def test_file_without_pretrained_uses_vocab_size(tmp_path):
    pd.DataFrame({"index": range(7)}).to_parquet(tmp_path / "vocab.parquet")
    initialize_file("Pretrained_Xavier", None, str(tmp_path / "vocab.parquet"), 4, 0, {}, str(tmp_path / "x.npy"))
    x = np.load(tmp_path / "x.npy")
    assert x.shape == (7, 4) and np.abs(x).max() <= ini.xavier_bound(7, 4) * (1 + 1e-6)


def test_fingerprint():
    base = fingerprint("Pretrained_Shuffled", {"mode": "rows_columns"})
    assert base == fingerprint("Pretrained_Shuffled", {"mode": "rows_columns"})
    assert base != fingerprint("Pretrained_Shuffled", {"mode": "elements"})
    assert len({fingerprint(n, {}) for n in ini.INITIALIZERS}) == len(ini.INITIALIZERS)


def test_register_adds_an_initializer(pretrained):
    @ini.register("Zeros_Test")
    def zeros(pretrained, shape, rng):
        return np.zeros(shape, dtype=np.float32)

    try:
        assert (initialize("Zeros_Test", pretrained, SHAPE, seed=0) == 0).all()
        assert len(fingerprint("Zeros_Test")) == 16
    finally:
        del ini.INITIALIZERS["Zeros_Test"]


def test_display_names():
    assert [display_name(n, "GloVe") for n in ini.INITIALIZERS] == [
        "Xavier",
        "GloVe",
        "GloVe_Xavier",
        "Xavier_GloVe",
        "GloVe_Shuffled",
        "Scaled",
    ]


@pytest.mark.parametrize("name", list(ini.INITIALIZERS))
def test_config_parameters_follow_pretrained_shape_rng(name):
    """embinit.checks.check offers the config every parameter after these three."""
    assert list(inspect.signature(ini.INITIALIZERS[name]).parameters)[:3] == ["pretrained", "shape", "rng"]


def test_every_declared_mode_is_implemented(pretrained):
    modes = typing.get_args(typing.get_type_hints(ini.pretrained_shuffled)["mode"])
    assert modes == ("rows_columns", "elements")
    for mode in modes:
        initialize("Pretrained_Shuffled", pretrained, SHAPE, seed=0, params={"mode": mode})


def test_only_xavier_ignores_the_pretrained_matrix():
    from embinit.layers.initializers import INITIALIZERS, reads_pretrained

    assert [name for name in INITIALIZERS if not reads_pretrained(name)] == ["Xavier"]
    rng_seed, shape = 3, (7, 5)
    pretrained = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    assert np.array_equal(
        initialize("Xavier", None, shape, rng_seed), initialize("Xavier", pretrained, shape, rng_seed)
    )
