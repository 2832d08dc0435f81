"""Table 4: 3CosAdd word analogy on an embedding layer after the transformations the model applies to it.

The question: does the input the transformer actually sees (scaled, standardized, plus position encoding)
still carry GloVe's analogy structure? Conventions follow gensim's `evaluate_word_analogies`, so counts can be
cross-checked against it: question "a b c d" asks a:b :: c:d; the prediction is the vocabulary word whose
vector has the highest cosine with unit(b) - unit(a) + unit(c), excluding a, b and c; a question counts only
when all four words (lowercased) are in the vocabulary.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from embinit.initializers import mean_std, pretrained_xavier, xavier
from embinit.posenc import sinusoidal_table
from embinit.tables import markdown_table, write_csv_md
from embinit.vocab import SPECIALS


class Context(NamedTuple):
    """Fixed random draws shared by the transformations, so rows differ only in what they apply."""
    pos_rows: np.ndarray  # one row of P per vocabulary row, chosen at random
    seed: int             # seed of the Xavier draw whose sigma_x the standardization uses


def make_context(shape: tuple[int, int], seed: int, max_len: int, pos_base: float) -> Context:
    table = sinusoidal_table(max_len, shape[1], base=pos_base)
    positions = np.random.default_rng(seed).integers(0, max_len, size=shape[0])
    return Context(table[positions].astype(np.float64), seed)


def _xavier_sigma(shape, seed: int) -> float:
    return mean_std(xavier(None, shape, np.random.default_rng(seed)))[1]


def scaled(x, ctx):
    """The model's input scaling: x sqrt(D)."""
    return x * np.sqrt(x.shape[1])


def pos_enc(x, ctx):
    return x + ctx.pos_rows


def xavier_std(x, ctx):
    """The Pretrained_Xavier initializer itself: (x - mean) * sigma_x / sigma_p."""
    return pretrained_xavier(x, x.shape, np.random.default_rng(ctx.seed)).astype(np.float64)


def pos_enc_rescaled(x, ctx):
    """P x sigma_p / sigma_x on the raw layer: P as large relative to GloVe as it is after Xavier-Std."""
    return x + ctx.pos_rows * mean_std(x)[1] / _xavier_sigma(x.shape, ctx.seed)


# SPEC Table 4's rows; the steps apply left to right to the pre-trained layer.
TRANSFORMS: dict[str, list[Callable]] = {
    "GloVe": [],
    "GloVe & Scaled": [scaled],
    "GloVe & Pos. Enc.": [pos_enc],
    "GloVe & Xavier-Std": [xavier_std],
    "GloVe & Xavier-Std & Scaled": [xavier_std, scaled],
    "GloVe & Xavier-Std & Pos. Enc.": [xavier_std, pos_enc],
    "GloVe & (Pos. Enc. x σp/σx)": [pos_enc_rescaled],
}


def transform(vectors: np.ndarray, name: str, ctx: Context) -> np.ndarray:
    x = np.asarray(vectors, dtype=np.float64)
    for step in TRANSFORMS[name]:
        x = step(x, ctx)
    return x


def load_questions(path) -> list[tuple[str, str, str, str]]:
    """The 4-word lines, lowercased; section headers (': ...') and malformed lines are skipped, as gensim does."""
    questions = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = line.lower().split()
            if not line.startswith(": ") and len(words) == 4:
                questions.append(tuple(words))
    return questions


def analogy_accuracy(vectors: np.ndarray, tokens, questions, n_special: int = len(SPECIALS),
                     batch: int = 2048) -> dict:
    """3CosAdd over the non-special rows (tokens: the vocabulary in row order), matching gensim's
    case-insensitive evaluation: a word is its lowercased form, and its first row stands for it.

    Returns correct, applicable (all four words in the vocabulary), total questions and accuracy.
    """
    words = [t.lower() for t in list(tokens)[n_special:]]
    first: dict[str, int] = {}
    for row, w in enumerate(words):
        first.setdefault(w, row)
    word_of_row = np.array([first[w] for w in words])
    ids = np.array([[first[w] for w in q] for q in questions if all(w in first for w in q)], dtype=np.int64)
    emb = np.asarray(vectors, dtype=np.float64)[n_special:]
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    unit = emb / np.where(norms == 0, 1, norms)  # a zero row stays zero: cosine 0 with everything

    correct = 0
    for start in range(0, len(ids), batch):
        q = ids[start:start + batch]  # columns a, b, c, d
        sims = (unit[q[:, 1]] - unit[q[:, 0]] + unit[q[:, 2]]) @ unit.T
        sims[(word_of_row == q[:, :3, None]).any(axis=1)] = -np.inf  # never answer with a, b or c
        correct += int((word_of_row[sims.argmax(axis=1)] == q[:, 3]).sum())
    applicable = len(ids)
    return {"accuracy": correct / applicable if applicable else np.nan, "correct": correct,
            "applicable": applicable, "total": len(questions)}


def evaluate(vectors: np.ndarray, tokens, questions, seed: int, max_len: int, pos_base: float) -> pd.DataFrame:
    """One row per Table 4 transformation: accuracy (fraction), correct, applicable, total."""
    ctx = make_context(vectors.shape, seed, max_len, pos_base)
    return pd.DataFrame([{"transformation": name, **analogy_accuracy(transform(vectors, name, ctx), tokens,
                                                                      questions)} for name in TRANSFORMS])


def table4(vectors_npy, tokens_parquet, questions_path, config: dict, csv_path, md_path) -> pd.DataFrame:
    """Table 4 on the layer of config `table4` (block, side, seed); P from config `model` (max_len, pos_base)."""
    spec, model = config["table4"], config["model"]
    vectors = np.load(vectors_npy)
    sidecar = pd.read_parquet(tokens_parquet, columns=["token", "matched"])
    tokens = sidecar.token.tolist()
    if len(tokens) != len(vectors):
        raise ValueError(f"{tokens_parquet}: {len(tokens)} tokens for {len(vectors)} rows of {vectors_npy}")
    table = evaluate(vectors, tokens, load_questions(questions_path), spec["seed"], model["max_len"],
                     model["pos_base"])
    source = config["blocks"][spec["block"]]["sources"][spec["side"]]
    if source is None:
        raise ValueError(f"table4: side {spec['side']} of block {spec['block']} has no embedding source")
    table.insert(0, "block", spec["block"])
    table.insert(1, "side", spec["side"])
    table.insert(2, "source", source)
    table.insert(3, "source_display", config["sources"][source]["display"])

    rows = [[r.transformation, f"{100 * r.accuracy:.1f}", f"{r.correct:,} / {r.applicable:,}"]
            for r in table.itertuples()]
    md = (f"# Table 4\n\n3CosAdd word analogy, {spec['side']} layer of {spec['block']} "
          f"(N = {len(vectors):,}, D = {vectors.shape[1]}); source: {table.source_display[0]} ({source}), "
          f"which has a vector for {int(sidecar.matched.sum()):,} of the {len(vectors):,} rows. "
          f"Accuracy over the {table.applicable.iloc[0]:,} of {table.total.iloc[0]:,} questions whose four words "
          f"are in the vocabulary. Pos. Enc.: one random row of P (max_len {model['max_len']}, "
          f"base {model['pos_base']}) per word, seed {spec['seed']}.\n\n"
          + markdown_table(["Transformation", "Accuracy (%)", "Correct / applicable"], rows))
    write_csv_md(csv_path, md_path, table, md)
    return table
