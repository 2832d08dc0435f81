import hashlib
import json
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
    assert (a == c) == (a == d) == (name in ("Pretrained", "Pretrained_RowNorm"))  # the two that draw nothing
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
        "GloVe_Gaussian",
        "GloVe_RowNorm",
        "GloVe_Whitened",
        "GloVe_PCA",
        "GloVe_UpProject",
    ]


def test_a_side_without_a_source_is_named_for_the_xavier_draw_it_gets():
    names = [display_name(n, "GloVe", sourced=False) for n in ("Xavier", "Pretrained", "Xavier_Pretrained", "Scaled")]
    assert names == ["Xavier", "GloVe (no source: Xavier)", "Xavier_GloVe (no source: Xavier)", "Scaled"]
    for name in ("Pretrained", "Xavier_Pretrained"):  # the name is true: the layer is Xavier's, draw for draw
        assert (
            initialize(name, None, SHAPE, seed=3, side="decoder")
            == initialize("Xavier", None, SHAPE, 3, side="decoder")
        ).all()


@pytest.mark.parametrize("name", list(ini.INITIALIZERS))
def test_config_parameters_follow_pretrained_shape_rng(name):
    """embinit.workflow.checks.check offers the config every parameter after these three."""
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


# Methods from the literature (docs/extending.md): each one's defining property on N = 2000 rows of D = 8.
WIDE = (2000, 8)


@pytest.fixture
def correlated():
    """Rows with a non-zero mean vector and a known covariance far from the identity (eigenvalues 0.1 to 2.9)."""
    rng = np.random.default_rng(11)
    a = rng.normal(size=(WIDE[1], WIDE[1]))
    cov = a @ a.T / WIDE[1] + 0.1 * np.eye(WIDE[1])
    x = rng.standard_normal(WIDE) @ np.linalg.cholesky(cov).T + rng.normal(0.0, 1.0, WIDE[1])
    return x.astype(np.float32)


def _moments(x):
    x = np.asarray(x, dtype=np.float64)
    return x.mean(axis=0), np.cov(x, rowvar=False)


def _inverse_root(cov):
    lam, vecs = np.linalg.eigh(cov)
    return (vecs / np.sqrt(lam)) @ vecs.T


def _row_correlation(x, y):
    """Mean over rows of the Pearson correlation of row i of x with row i of y."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x, axis=1, keepdims=True)
    y = np.asarray(y, dtype=np.float64) - np.mean(y, axis=1, keepdims=True)
    return float(np.mean((x * y).sum(axis=1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)))


LITERATURE = [
    ("Pretrained_Gaussian", {"scale": "pretrained"}),
    ("Pretrained_Gaussian", {"scale": "xavier"}),
    ("Pretrained_RowNorm", {}),
    ("Pretrained_Whitened", {"method": "zca"}),
    ("Pretrained_Whitened", {"method": "pca"}),
    ("Pretrained_PCA", {"scale": "xavier"}),
    ("Pretrained_PCA", {"scale": "projection"}),
    ("Pretrained_UpProject", {}),
]


@pytest.mark.parametrize("name, params", LITERATURE)
def test_literature_methods_give_float32_of_the_shape(correlated, pretrained, name, params):
    for matrix in (correlated, pretrained):
        x = initialize(name, matrix, matrix.shape, seed=0, params=params)
        assert x.dtype == np.float32 and x.shape == matrix.shape and np.isfinite(x).all()


def test_gaussian_keeps_mean_and_covariance_not_the_rows(correlated):
    x = initialize("Pretrained_Gaussian", correlated, WIDE, seed=0)
    mean_p, cov_p = _moments(correlated)
    mean, cov = _moments(x)
    w = _inverse_root(cov_p)  # in the pre-trained rows' whitened coordinates each error is ~ 1/sqrt(N) = 0.022
    mean_tol, cov_tol = 0.1, 0.15
    assert np.abs((mean - mean_p) @ w).max() < mean_tol
    assert np.abs(w @ cov @ w - np.eye(WIDE[1])).max() < cov_tol
    # the tolerances cannot pass a wrong layer: no mean, only the variances, or the identity covariance
    assert np.abs(mean_p @ w).max() > 10 * mean_tol
    assert np.abs(w @ np.diag(np.diag(cov_p)) @ w - np.eye(WIDE[1])).max() > 10 * cov_tol
    assert np.abs(w @ w - np.eye(WIDE[1])).max() > 10 * cov_tol
    # fresh rows: none is a pre-trained row, and row i is unrelated to pre-trained row i
    assert not (x[:, None, :] == correlated[None, :, :]).all(axis=2).any()
    assert abs(_row_correlation(x - mean_p, correlated - mean_p)) < 0.05


def test_gaussian_same_seed_same_matrix(correlated):
    a, b = (initialize("Pretrained_Gaussian", correlated, WIDE, seed=4) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, initialize("Pretrained_Gaussian", correlated, WIDE, seed=5))


def test_gaussian_xavier_scale_has_xavier_sigma_and_the_structure(correlated):
    x = initialize("Pretrained_Gaussian", correlated, WIDE, seed=0, params={"scale": "xavier"})
    mean, sigma = mean_std(x)
    assert sigma == pytest.approx(mean_std(xavier(None, WIDE, np.random.default_rng(99)))[1], rel=0.03)
    assert abs(mean) < 1e-6 * sigma
    _, cov_p = _moments(correlated)
    _, cov = _moments(x)
    std_p, std = np.sqrt(np.diag(cov_p)), np.sqrt(np.diag(cov))
    np.testing.assert_allclose(cov / np.outer(std, std), cov_p / np.outer(std_p, std_p), atol=0.1)


def test_gaussian_singular_covariance(correlated):
    """Rank 3 of D = 8 (a duplicated column among them): eigh's tiny negative eigenvalues are clipped to 0."""
    basis = np.random.default_rng(2).normal(size=(3, WIDE[1]))
    basis[:, -1] = basis[:, 0]
    x3 = (correlated[:, :3].astype(np.float64) @ basis).astype(np.float32)
    x = initialize("Pretrained_Gaussian", x3, WIDE, seed=0)
    assert np.isfinite(x).all()
    np.testing.assert_allclose(x[:, -1], x[:, 0], atol=1e-4 * np.abs(x).max())
    centred = x.astype(np.float64) - x3.mean(axis=0)
    in_span = np.linalg.lstsq(basis.T, centred.T, rcond=None)[0].T @ basis
    assert np.abs(centred - in_span).max() < 1e-4 * np.abs(centred).max()  # stays in the rows' affine span


def test_rownorm_keeps_directions_at_the_xavier_row_norm(correlated):
    p = correlated.copy()
    p[5] = 0.0
    x = initialize("Pretrained_RowNorm", p, WIDE, seed=0)
    target = math.sqrt(WIDE[1]) * ini.xavier_bound(*WIDE) / math.sqrt(3)
    assert target == pytest.approx(
        math.sqrt(np.mean(np.sum(xavier(None, WIDE, np.random.default_rng(0)) ** 2, 1))), rel=0.02
    )
    nonzero = np.arange(WIDE[0]) != 5
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    np.testing.assert_allclose(norms[nonzero], target, rtol=1e-5)
    cosine = np.sum(x[nonzero].astype(np.float64) * p[nonzero], axis=1) / norms[nonzero]
    np.testing.assert_allclose(cosine / np.linalg.norm(p[nonzero].astype(np.float64), axis=1), 1.0, atol=1e-6)
    assert (x[5] == 0).all()


@pytest.mark.parametrize("method", ["zca", "pca"])
def test_whitened_covariance_is_identity_at_xavier_sigma(correlated, method):
    x = ini.pretrained_whitened(correlated, WIDE, np.random.default_rng(7), method=method)
    _, cov = _moments(x)
    scale = np.diag(cov).mean()
    assert np.abs(cov - np.diag(np.diag(cov))).max() < 1e-5 * scale  # uncorrelated
    np.testing.assert_allclose(np.diag(cov), scale, rtol=1e-5)  # equal variances: proportional to the identity
    mean, sigma = mean_std(x)
    assert sigma == pytest.approx(mean_std(xavier(None, WIDE, np.random.default_rng(7)))[1], rel=1e-6)
    assert abs(mean) < 1e-6 * sigma


def test_zca_stays_closest_to_the_input(correlated):
    centred = correlated - correlated.mean(axis=0)
    zca, pca = (initialize("Pretrained_Whitened", correlated, WIDE, 0, {"method": m}) for m in ("zca", "pca"))
    assert _row_correlation(zca, centred) > 0.8 > _row_correlation(pca, centred) + 0.5


def test_pca_columns_are_the_principal_components_in_order(correlated):
    x = initialize("Pretrained_Whitened", correlated, WIDE, 0, {"method": "pca"}).astype(np.float64)
    mean_p, cov_p = _moments(correlated)
    lam, vecs = np.linalg.eigh(cov_p)
    for j, (value, vec) in enumerate(zip(lam[::-1], vecs[:, ::-1].T)):
        vec = vec * np.sign(vec[np.abs(vec).argmax()])  # sign convention: largest entry positive
        np.testing.assert_allclose(
            x[:, j] * np.sqrt(value) / x[:, j].std(ddof=1), (correlated - mean_p) @ vec, atol=1e-4
        )


def test_whitened_rank_deficient_stays_finite(correlated):
    p = correlated.copy()
    p[:, 1] = p[:, 0]
    for method in ("zca", "pca"):
        assert np.isfinite(initialize("Pretrained_Whitened", p, WIDE, 0, {"method": method})).all()


@pytest.mark.parametrize(
    "name, params, match",
    [
        ("Pretrained_Gaussian", {"scale": "huge"}, "unknown scale 'huge'; allowed: pretrained, xavier"),
        ("Pretrained_Whitened", {"method": "pcx"}, "unknown method 'pcx'; allowed: zca, pca"),
        ("Pretrained_PCA", {"scale": "pretrained"}, "unknown scale 'pretrained'; allowed: xavier, projection"),
    ],
)
def test_literature_unknown_value(correlated, name, params, match):
    with pytest.raises(ValueError, match=match):
        initialize(name, correlated, WIDE, seed=0, params=params)


def test_literature_declared_values_are_implemented():
    names = ("Pretrained_Gaussian", "Pretrained_Whitened", "Pretrained_PCA")
    hints = {n: typing.get_type_hints(ini.INITIALIZERS[n]) for n in names}
    assert typing.get_args(hints["Pretrained_Gaussian"]["scale"]) == ("pretrained", "xavier")
    assert typing.get_args(hints["Pretrained_Whitened"]["method"]) == ("zca", "pca")
    assert typing.get_args(hints["Pretrained_PCA"]["scale"]) == ("xavier", "projection")


# A source at a D other than its own (issue 41 item 2): the source's N x d rows to an N x D layer.
def _mapped(name, pretrained, dim, seed=0, params=None, side=""):
    return ini.initialize_mapping(name, pretrained, (pretrained.shape[0], dim), seed, params, side)


def _cosines(x):
    x = np.asarray(x, dtype=np.float64)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    return unit @ unit.T


def test_pca_projection_is_the_top_components_in_order(correlated):
    dim = 3
    x = _mapped("Pretrained_PCA", correlated, dim, params={"scale": "projection"}).astype(np.float64)
    assert x.shape == (WIDE[0], dim)
    mean_p, cov_p = _moments(correlated)
    lam, vecs = np.linalg.eigh(cov_p)
    lam, vecs = lam[::-1], vecs[:, ::-1]
    for j in range(dim):  # column j: the scores on the j-th largest component (largest entry positive)
        vec = vecs[:, j] * np.sign(vecs[np.abs(vecs[:, j]).argmax(), j])
        np.testing.assert_allclose(x[:, j], (correlated - mean_p) @ vec, atol=1e-4)
    _, cov = _moments(x)
    assert np.abs(cov - np.diag(np.diag(cov))).max() < 1e-5 * cov[0, 0]  # orthogonal components: uncorrelated
    np.testing.assert_allclose(np.diag(cov), lam[:dim], rtol=1e-5)  # each column's variance: its eigenvalue
    assert (np.diff(np.diag(cov)) < 0).all()  # variance explained decreasing
    assert np.diag(cov).sum() < np.trace(cov_p)  # the D columns explain part of it, d = D would explain all


def test_pca_xavier_scale_is_the_same_subspace_at_xavier_sigma(correlated):
    dim = 3
    projection = _mapped("Pretrained_PCA", correlated, dim, 4, {"scale": "projection"}).astype(np.float64)
    x = _mapped("Pretrained_PCA", correlated, dim, 4, {"scale": "xavier"}).astype(np.float64)
    rng = np.random.default_rng([4, ini.zlib.crc32(b"")])  # the generator the layer used
    mean, sigma = mean_std(x)
    assert sigma == pytest.approx(mean_std(xavier(None, (WIDE[0], dim), rng))[1], rel=1e-6)
    assert abs(mean) < 1e-6 * sigma
    ratio = x / projection  # one factor for every entry: the same scores at another scale
    np.testing.assert_allclose(ratio, ratio.mean(), rtol=1e-4)
    assert sigma < 0.5 * mean_std(projection)[1]


def test_pca_at_the_source_dim_keeps_every_distance(correlated):
    x = _mapped("Pretrained_PCA", correlated, WIDE[1], params={"scale": "projection"}).astype(np.float64)
    centred = correlated - correlated.mean(axis=0, dtype=np.float64)
    np.testing.assert_allclose(x @ x.T, centred @ centred.T, atol=1e-3)  # a rotation of the centred rows


def test_upproject_keeps_cosines_and_norms(correlated):
    dim = 6 * WIDE[1]
    x = _mapped("Pretrained_UpProject", correlated, dim, seed=3)
    assert x.shape == (WIDE[0], dim) and x.dtype == np.float32
    np.testing.assert_allclose(_cosines(x), _cosines(correlated), atol=1e-6)
    norms_p = np.linalg.norm(correlated.astype(np.float64), axis=1)
    np.testing.assert_allclose(np.linalg.norm(x.astype(np.float64), axis=1), norms_p, rtol=1e-6)
    rms = lambda m: math.sqrt(np.mean(np.square(m, dtype=np.float64)))  # noqa: E731
    assert rms(x) == pytest.approx(rms(correlated) / math.sqrt(dim / WIDE[1]), rel=1e-6)  # sigma / sqrt(D / d)
    assert mean_std(x)[1] == pytest.approx(mean_std(correlated)[1] / math.sqrt(dim / WIDE[1]), rel=0.1)
    singular = np.linalg.svd(x.astype(np.float64), compute_uv=False)
    assert singular[WIDE[1]] < 1e-5 * singular[0] < singular[WIDE[1] - 1]  # a d-dimensional subspace of D columns


def test_upproject_is_seeded(correlated):
    a, b = (
        _mapped("Pretrained_UpProject", correlated, 20, seed=1),
        _mapped("Pretrained_UpProject", correlated, 20, seed=1),
    )
    np.testing.assert_array_equal(a, b)
    for other in (
        _mapped("Pretrained_UpProject", correlated, 20, seed=2),
        _mapped("Pretrained_UpProject", correlated, 20, 1, side="decoder"),
    ):
        assert not np.allclose(a, other)
        np.testing.assert_allclose(_cosines(other), _cosines(a), atol=1e-6)  # another map, the same geometry


@pytest.mark.parametrize(
    "name, dim, match",
    [
        ("Pretrained_PCA", 9, r"Pretrained_PCA: pre-trained matrix is \(2000, 8\), cannot give \(2000, 9\)"),
        (
            "Pretrained_UpProject",
            7,
            r"Pretrained_UpProject: pre-trained matrix is \(2000, 8\), cannot give \(2000, 7\)",
        ),
    ],
)
def test_mapping_in_the_wrong_direction(correlated, name, dim, match):
    with pytest.raises(ValueError, match=match):
        _mapped(name, correlated, dim)
    with pytest.raises(ValueError, match=f"{name}: D = {dim} "):  # the function itself refuses too
        ini.INITIALIZERS[name](correlated, (WIDE[0], dim), np.random.default_rng(0))


def test_fits_dim():
    fits = {n: (ini.fits_dim(n, 50, 300), ini.fits_dim(n, 384, 50), ini.fits_dim(n, 50, 50)) for n in ini.INITIALIZERS}
    assert fits["Pretrained_UpProject"] == (True, False, True)
    assert fits["Pretrained_PCA"] == (False, True, True)
    assert fits["Xavier"] == (True, True, True)
    assert {n for n, f in fits.items() if f != (False, False, True)} == {
        "Pretrained_UpProject",
        "Pretrained_PCA",
        "Xavier",
    }
    assert ini.mapping_initializers() == {"reduce": ["Pretrained_PCA"], "expand": ["Pretrained_UpProject"]}


@pytest.mark.parametrize("name, d, dim", [("Pretrained_PCA", 8, 3), ("Pretrained_UpProject", 8, 20)])
def test_mapping_files_read_a_source_of_another_dim(tmp_path, correlated, name, d, dim):
    vocab, source = tmp_path / "vocab.parquet", tmp_path / "pretrained.npy"
    pd.DataFrame({"index": range(WIDE[0])}).to_parquet(vocab)
    np.save(source, correlated)
    initialize_file(name, str(source), str(vocab), dim, 5, {}, str(tmp_path / "x.npy"), side="encoder")
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), _mapped(name, correlated, dim, 5, {}, "encoder"))
    initialize_file(name, None, str(vocab), dim, 5, {}, str(tmp_path / "y.npy"))  # a side without a source: Xavier
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), initialize("Xavier", None, (WIDE[0], dim), 5))
    with pytest.raises(ValueError, match=r"pretrained.npy: shape \(2000, 8\) does not match vocabulary"):
        initialize_file("Pretrained_Xavier", str(source), str(vocab), dim, 5, {}, str(tmp_path / "z.npy"))
    pd.DataFrame({"index": range(WIDE[0] + 1)}).to_parquet(vocab)
    with pytest.raises(ValueError, match=r"pretrained.npy: shape \(2000, 8\) does not match vocabulary"):
        initialize_file(name, str(source), str(vocab), dim, 5, {}, str(tmp_path / "z.npy"))


def test_mapping_fingerprint_holds_its_driver():
    fp = ini.fingerprint("Pretrained_PCA", {"scale": "xavier"})
    code = ini.code_fingerprint(ini.INITIALIZERS["Pretrained_PCA"], ini.initialize, ini.initialize_mapping)
    assert (
        fp
        == hashlib.sha256(
            json.dumps({"name": "Pretrained_PCA", "params": {"scale": "xavier"}, "code": code}).encode()
        ).hexdigest()[:16]
    )
    assert fp != ini.fingerprint("Pretrained_PCA", {"scale": "projection"})


def test_register_mapping_adds_an_initializer(correlated):
    snapshot = ini.INITIALIZERS.snapshot()

    @ini.register_mapping("First_Columns_Test", "reduce")
    def first_columns(pretrained, shape, rng):
        return np.asarray(pretrained[:, : shape[1]], dtype=np.float32)

    try:
        assert ini.fits_dim("First_Columns_Test", 8, 2) and not ini.fits_dim("First_Columns_Test", 2, 8)
        np.testing.assert_array_equal(_mapped("First_Columns_Test", correlated, 2), correlated[:, :2])
    finally:
        ini.INITIALIZERS.restore(snapshot)
    assert "First_Columns_Test" not in ini.INITIALIZERS and not ini.maps_dim("First_Columns_Test")
