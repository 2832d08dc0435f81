"""Embedding initializers of SPEC section 1, as a registry of small pure functions.

Each initializer is `fn(pretrained, shape, rng, **params)` -> a float32 array of that shape, deterministic given
`rng`. Adding one = one `@register` function here + one entry in config `initializers` /
`initializer_params`, or, without forking the package, in the user's own file named by config `extensions`
(embinit.workflow.extensions). A side without a pre-trained source gets Xavier whatever the initializer. One added by
`register_mapping` instead maps the source's N x d matrix to a layer of another D (a block's own `dim`).
The config may set the parameters after `rng`; embinit.workflow.checks.check enforces, before any job, that each is one the
function takes, of its annotated type (`int`, `float`, `str`, `bool`), one of the values a `Literal[...]` lists, and
no less than an `Annotated[..., AtLeast(x)]` bound (embinit.registry.AtLeast).
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import asdict, dataclass
from typing import Callable, Literal

import numpy as np
import pyarrow.parquet as pq

from embinit.identity.fingerprints import code_fingerprint
from embinit.io import atomic_path
from embinit.identity.digests import spec_digest, text_digest
from embinit.registry import Registry

Initializer = Callable[..., np.ndarray]
INITIALIZERS: Registry = Registry("initializer", "ignores_pretrained", "reduces_dim", "expands_dim")
_IGNORE_PRETRAINED: set[str] = INITIALIZERS.flags["ignores_pretrained"]
# the initializers of `register_mapping`, by the direction they map a source's d columns to the layer's D
_MAPS_DIM: dict[str, set[str]] = {
    "reduce": INITIALIZERS.flags["reduces_dim"],
    "expand": INITIALIZERS.flags["expands_dim"],
}
# `register`, `reads_pretrained`, `_lookup` and `initialize` keep their text verbatim: it enters every initializer's
# fingerprint (embinit.identity.fingerprints), so an edit reruns every layer and run.


def register(name: str, reads_pretrained: bool = True) -> Callable[[Initializer], Initializer]:
    """Add `fn` to the registry; `reads_pretrained=False` for one that needs only the layer's shape (Xavier,
    examples/scaled_xavier.py): its runs then need neither the source's download nor its extraction, and `fn`
    gets `pretrained=None`. An initializer that reads the matrix gives Xavier on a side without a source."""

    def add(fn: Initializer) -> Initializer:
        INITIALIZERS[name] = fn
        if not reads_pretrained:
            _IGNORE_PRETRAINED.add(name)
        return fn

    return add


def reads_pretrained(name: str) -> bool:
    """Whether the initializer's layer depends on the pre-trained matrix. Xavier's does not, so a block's
    Xavier runs need neither the source's download nor its extraction (only the vocabulary size and D)."""
    _lookup(name)
    return name not in _IGNORE_PRETRAINED


def register_mapping(name: str, direction: Literal["reduce", "expand"]) -> Callable[[Initializer], Initializer]:
    """Add `fn`, an initializer whose layer may have another D than its source's d (`direction`: reduce, D <= d;
    expand, D >= d): it gets the source's N x d matrix and the layer's N x D shape (`initialize_mapping`), so a
    block may set a `dim` of its own (config `blocks.*.dim`) and run it."""

    def add(fn: Initializer) -> Initializer:
        register(name)(fn)
        _MAPS_DIM[direction].add(name)
        return fn

    return add


def maps_dim(name: str) -> bool:
    """Whether the initializer was registered by `register_mapping` (its layer goes through `initialize_mapping`)."""
    return any(name in names for names in _MAPS_DIM.values())


def fits_dim(name: str, d: int, dim: int) -> bool:
    """Whether the initializer makes a layer of D = `dim` columns from a source of d: any at D = d, one that ignores
    the source (Xavier), and one of `register_mapping` in its direction."""
    _lookup(name)
    if d == dim or name in _IGNORE_PRETRAINED:
        return True
    return name in _MAPS_DIM["reduce" if dim < d else "expand"]


def mapping_initializers() -> dict[str, list[str]]:
    """The initializers of `register_mapping` by direction (reduce, expand), for error messages."""
    return {direction: sorted(names) for direction, names in _MAPS_DIM.items()}


def xavier_bound(n: int, d: int) -> float:
    """a = sqrt(6 / (N + D)): torch `xavier_uniform_` on an N x D weight (fan_out = N, fan_in = D, gain 1)."""
    return math.sqrt(6.0 / (n + d))


def mean_std(x: np.ndarray) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1) over all entries, computed in float64."""
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()), float(x.std(ddof=1))


def display_name(initializer: str, family: str, sourced: bool = True) -> str:
    """The paper's table name: Pretrained -> GloVe, Pretrained_Xavier -> GloVe_Xavier, Xavier -> Xavier. Where the
    layer's side has no source (`sourced` false), an initializer that reads one gives Xavier's draw: its name says so,
    Pretrained -> 'GloVe (no source: Xavier)'."""
    name = initializer.replace("Pretrained", family)
    return name if sourced or name == initializer else f"{name} (no source: Xavier)"


@register("Xavier", reads_pretrained=False)
def xavier(pretrained, shape, rng):
    a = xavier_bound(*shape)
    return rng.uniform(-a, a, size=shape).astype(np.float32)


@register("Pretrained")
def copy_pretrained(pretrained, shape, rng):
    return np.array(pretrained, dtype=np.float32, copy=True)


@register("Pretrained_Xavier")
def pretrained_xavier(pretrained, shape, rng):
    """The proposal: pre-trained values centred and rescaled to the std of a Xavier draw of the same shape."""
    mean_p, sigma_p = mean_std(pretrained)
    _, sigma_x = mean_std(xavier(None, shape, rng))
    return ((np.asarray(pretrained, dtype=np.float64) - mean_p) * (sigma_x / sigma_p)).astype(np.float32)


@register("Xavier_Pretrained")
def xavier_pretrained(pretrained, shape, rng):
    """Control of appendix A.3: Xavier noise moved to the pre-trained mean and std."""
    mean_p, sigma_p = mean_std(pretrained)
    noise = xavier(None, shape, rng).astype(np.float64)
    mean_x, sigma_x = mean_std(noise)
    return ((noise - mean_x) * (sigma_p / sigma_x) + mean_p).astype(np.float32)


@register("Pretrained_Shuffled")
def pretrained_shuffled(pretrained, shape, rng, mode: Literal["rows_columns", "elements"] = "rows_columns"):
    """Same values, structure destroyed: permute rows and columns (section 3.4), or every entry."""
    x = np.asarray(pretrained, dtype=np.float32)
    if mode == "rows_columns":
        return x[rng.permutation(x.shape[0])][:, rng.permutation(x.shape[1])]
    if mode == "elements":
        return rng.permutation(x.ravel()).reshape(x.shape)
    raise ValueError(f"Pretrained_Shuffled: unknown mode {mode!r}; allowed: rows_columns, elements")


@register("Scaled")
def scaled(pretrained, shape, rng, base: Literal["Pretrained_Xavier", "Xavier"] = "Pretrained_Xavier", k: float = 1.0):
    """Table 12's dose: the base's layer times k, so its sigma is k times the base's (Xavier: the content-free
    control)."""
    layer = pretrained_xavier(pretrained, shape, rng) if base == "Pretrained_Xavier" else xavier(None, shape, rng)
    return (layer * np.float32(k)).astype(np.float32)


WHITEN_EPS = 1e-8  # Pretrained_Whitened's eps, relative to the largest eigenvalue: a rank-deficient matrix stays finite


def _covariance_eigh(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows' mean vector, and the eigenvalues (ascending, negatives from rounding clipped to 0) and eigenvectors
    of their D x D sample covariance (ddof=1), all in float64."""
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=0)
    lam, vecs = np.linalg.eigh(np.cov(x, rowvar=False, ddof=1).reshape(x.shape[1], x.shape[1]))
    return mu, np.clip(lam, 0.0, None), vecs


@register("Pretrained_Gaussian")
def pretrained_gaussian(pretrained, shape, rng, scale: Literal["pretrained", "xavier"] = "pretrained"):
    """Hugging Face transformers' mean/covariance resize (2024): every row drawn from the rows' N(mu, Sigma)."""
    if scale not in ("pretrained", "xavier"):
        raise ValueError(f"Pretrained_Gaussian: unknown scale {scale!r}; allowed: pretrained, xavier")
    mu, lam, vecs = _covariance_eigh(pretrained)
    root = (vecs * np.sqrt(lam)) @ vecs.T  # symmetric square root of Sigma: no sign or basis choice of eigh leaks in
    layer = rng.standard_normal(size=shape) @ root + mu
    # `xavier`: centred and rescaled as Pretrained_Xavier does (its own code, so its numbers are untouched)
    return pretrained_xavier(layer, shape, rng) if scale == "xavier" else layer.astype(np.float32)


@register("Pretrained_RowNorm")
def pretrained_rownorm(pretrained, shape, rng):
    """Length normalization (Xing et al. 2015): each row's direction kept, its norm a Xavier row's expected one."""
    x = np.asarray(pretrained, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    # sqrt(D) a / sqrt(3): the root of E|row|^2 for D i.i.d. U(-a, a) entries; a zero row stays zero
    target = math.sqrt(shape[1]) * xavier_bound(*shape) / math.sqrt(3.0)
    return (x * np.divide(target, norms, out=np.zeros_like(norms), where=norms > 0)).astype(np.float32)


@register("Pretrained_Whitened")
def pretrained_whitened(pretrained, shape, rng, method: Literal["zca", "pca"] = "zca"):
    """Whitening for isotropy (Su et al. 2021, 'Whitening sentence representations'), rescaled to Xavier's sigma."""
    if method not in ("zca", "pca"):
        raise ValueError(f"Pretrained_Whitened: unknown method {method!r}; allowed: zca, pca")
    mu, lam, vecs = _covariance_eigh(pretrained)
    eps = WHITEN_EPS * max(float(lam[-1]), np.finfo(np.float64).tiny)
    if method == "pca":  # principal components first, each eigenvector's largest entry positive (as sklearn's PCA)
        lam, vecs = lam[::-1], vecs[:, ::-1]
        vecs = vecs * np.sign(vecs[np.abs(vecs).argmax(axis=0), np.arange(vecs.shape[1])])
    transform = vecs / np.sqrt(lam + eps)  # PCA: X_c E diag(1 / sqrt(lambda + eps)); ZCA rotates back by E^T
    if method == "zca":
        transform = transform @ vecs.T
    return pretrained_xavier((np.asarray(pretrained, dtype=np.float64) - mu) @ transform, shape, rng)


def _principal_axes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows' mean vector, their covariance's eigenvalues in descending order and its eigenvectors (columns) in
    that order, each eigenvector's largest-magnitude entry positive (as scikit-learn's PCA), all in float64."""
    mu, lam, vecs = _covariance_eigh(x)
    lam, vecs = lam[::-1], vecs[:, ::-1]
    return mu, lam, vecs * np.sign(vecs[np.abs(vecs).argmax(axis=0), np.arange(vecs.shape[1])])


@register_mapping("Pretrained_PCA", "reduce")
def pretrained_pca(pretrained, shape, rng, scale: Literal["xavier", "projection"] = "xavier"):
    """OFA's factorization (Liu et al. 2024): the rows' scores on their top D principal components, at Xavier's
    sigma or the projection's own."""
    if scale not in ("xavier", "projection"):
        raise ValueError(f"Pretrained_PCA: unknown scale {scale!r}; allowed: xavier, projection")
    d, dim = np.shape(pretrained)[1], shape[1]
    if dim > d:
        raise ValueError(f"Pretrained_PCA: D = {dim} exceeds the source's d = {d}; PCA keeps at most d components")
    mu, _, vecs = _principal_axes(pretrained)
    scores = (np.asarray(pretrained, dtype=np.float64) - mu) @ vecs[:, :dim]  # (N, D), column j: component j
    return pretrained_xavier(scores, shape, rng) if scale == "xavier" else scores.astype(np.float32)


@register_mapping("Pretrained_UpProject", "expand")
def pretrained_upproject(pretrained, shape, rng):
    """HyperCloning's expansion (Samragh et al. 2024) as a seeded random orthonormal map from d to D columns: every
    dot product, so every norm and cosine, kept."""
    d, dim = np.shape(pretrained)[1], shape[1]
    if dim < d:
        raise ValueError(f"Pretrained_UpProject: D = {dim} is below the source's d = {d}; it maps to a larger D")
    q, r = np.linalg.qr(rng.standard_normal(size=(dim, d)))  # (D, d), orthonormal columns
    q = q * np.where(np.diag(r) < 0, -1.0, 1.0)  # R's diagonal positive: q is Haar-distributed (Mezzadri 2007)
    return (np.asarray(pretrained, dtype=np.float64) @ q.T).astype(np.float32)  # X Q^T (Q^T)^T = X X^T


def _lookup(name: str) -> Initializer:
    if name not in INITIALIZERS:
        raise ValueError(f"unknown initializer {name!r}; allowed: {', '.join(INITIALIZERS)}")
    return INITIALIZERS[name]


def initialize(
    name: str,
    pretrained: np.ndarray | None,
    shape: tuple[int, int],
    seed: int,
    params: dict | None = None,
    side: str = "",
) -> np.ndarray:
    """The N x D float32 layer `name` gives; Xavier for an initializer that reads the pre-trained matrix when
    there is none (a side without a source).

    `side` ("encoder" / "decoder") is mixed into the seed so two layers drawn with the same run seed are
    independent rather than the same random numbers reshaped.
    """
    fn = _lookup(name)
    shape = (int(shape[0]), int(shape[1]))
    rng = np.random.default_rng([int(seed), zlib.crc32(side.encode())])
    if pretrained is None:
        return fn(None, shape, rng, **(params or {})) if name in _IGNORE_PRETRAINED else xavier(None, shape, rng)
    if tuple(pretrained.shape) != shape:
        raise ValueError(f"{name}: pre-trained matrix is {tuple(pretrained.shape)}, expected {shape}")
    return fn(pretrained, shape, rng, **(params or {}))


def initialize_mapping(
    name: str,
    pretrained: np.ndarray | None,
    shape: tuple[int, int],
    seed: int,
    params: dict | None = None,
    side: str = "",
) -> np.ndarray:
    """`initialize` for an initializer of `register_mapping`: the source's N x d matrix gives an N x D layer, D
    other than d in the entry's direction (`fits_dim`); Xavier on a side without a source."""
    fn = _lookup(name)
    if pretrained is None:
        return initialize(name, None, shape, seed, params, side)
    shape = (int(shape[0]), int(shape[1]))
    if pretrained.shape[0] != shape[0] or not fits_dim(name, pretrained.shape[1], shape[1]):
        raise ValueError(
            f"{name}: pre-trained matrix is {tuple(pretrained.shape)}, cannot give {shape}; the layer needs its N "
            f"rows, and its D another than d only in the direction the initializer maps ({mapping_initializers()})"
        )
    rng = np.random.default_rng([int(seed), zlib.crc32(side.encode())])  # as `initialize` seeds its layers
    return fn(pretrained, shape, rng, **(params or {}))


def fingerprint(name: str, params: dict | None = None) -> str:
    """Short hash of an initializer's name, params and code: the code `initialize` (and `initialize_mapping`, for
    an entry of `register_mapping`) runs for it (its function and what that calls,
    embinit.identity.fingerprints.code_fingerprint). A Snakemake `params:` value, so editing one initializer reruns only its
    jobs, whether it is built in or in an extension file."""
    drivers = (initialize, initialize_mapping) if maps_dim(name) else (initialize,)
    blob = json.dumps({"name": name, "params": params or {}, "code": code_fingerprint(_lookup(name), *drivers)})
    return text_digest(blob, 16)


@dataclass(frozen=True)
class LayerSpec:
    """What makes a layer the layer it is (embinit.workflow.specs.layer_spec); `identity()` is what its sidecar's digest hashes
    and what the layer rule hands its job (plain values, which Snakemake's params trigger compares)."""

    initializer: str  # its registry entry (a sweep's or a named setting's, not the name the config uses)
    params: dict  # the entry's params
    fingerprint: str  # `fingerprint(initializer, params)`: editing its code rebuilds its layers
    seed: int
    dim: int  # D
    side: str  # "encoder" | "decoder": mixed into the seed

    @classmethod
    def of(cls, identity: dict) -> LayerSpec:
        return cls(**identity)

    def identity(self) -> dict:
        return asdict(self)

    @property
    def digest(self) -> str:
        return spec_digest(self.identity())


def initialize_file(
    name: str,
    pretrained_npy: str | None,
    vocab_path: str,
    dim: int,
    seed: int,
    params: dict | None,
    out_npy: str,
    side: str = "",
) -> None:
    """Write the layer for one vocabulary (N = its rows, D = `dim`) as an N x D float32 .npy; an initializer of
    `register_mapping` may read a source of another d."""
    shape = (pq.read_metadata(vocab_path).num_rows, int(dim))
    pretrained_matrix = np.load(pretrained_npy) if pretrained_npy else None
    want = shape[:1] if maps_dim(name) else shape  # a mapping initializer reads a source of any d (its own check)
    if pretrained_matrix is not None and pretrained_matrix.shape[: len(want)] != want:
        raise ValueError(
            f"{pretrained_npy}: shape {pretrained_matrix.shape} does not match vocabulary {vocab_path} x dim, {shape}"
        )
    matrix = (initialize_mapping if maps_dim(name) else initialize)(name, pretrained_matrix, shape, seed, params, side)
    with atomic_path(out_npy) as tmp:
        np.save(tmp, matrix)


def layer_problem(layer_npy: str, vocab_path: str, dim: int) -> str | None:
    """Why a built layer cannot be what its job made for this vocabulary and D: not an .npy, cut short, or of another
    shape (a valid (V, 64) file under a D = 50 block would train a D = 64 model). None when it fits, or when either
    file is absent (its job runs anyway)."""
    try:
        shape = np.load(layer_npy, mmap_mode="r").shape  # the header alone; a cut file does not map
    except FileNotFoundError:
        return None
    except (OSError, ValueError, EOFError) as err:
        return f"{layer_npy} is not a readable .npy file or is cut short ({err})"
    try:
        expected = (pq.read_metadata(vocab_path).num_rows, int(dim))
    except (OSError, ValueError):
        return None  # the vocabulary is absent or being rebuilt: the layer is rebuilt after it anyway
    if shape != expected:
        return f"{layer_npy} has shape {shape}, its vocabulary {vocab_path} and D need {expected}"
    return None
