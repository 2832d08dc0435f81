"""3CosAdd word analogy on an embedding layer after the transformations the model applies to it (Table 4's rows).

Conventions follow gensim's `evaluate_word_analogies`, so counts can be cross-checked against it: question
"a b c d" asks a:b :: c:d; the prediction is the vocabulary word whose vector has the highest cosine with
unit(b) - unit(a) + unit(c), excluding a, b and c; a question counts only when all four words (lowercased) are in
the vocabulary.

"Pos. Enc." is the transformer's input, x sqrt(D) + P (config `table4.pos_enc: model_input`): the paper says
"embeddings are scaled before adding positional encodings", and only this reading leaves GloVe's accuracy
unchanged, as its Table 4 reports. `pos_enc: unscaled` is the literal reading x + P. Each word gets one row of
P, drawn at random from the first `table4.pos_rows` rows of the sinusoidal table; the paper does not give that
number, and the accuracy under Xavier-Std depends on it (hence the report `table4_sensitivity`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from embinit.data.vocab import SPECIALS
from embinit.layers.initializers import mean_std, pretrained_xavier, xavier
from embinit.layers.position_table import sinusoidal_table

POS_ENC_MODES = ("model_input", "unscaled")


class Context(NamedTuple):
    """Fixed random draws shared by the transformations, so rows differ only in what they apply."""

    p: np.ndarray  # the row of P added to each vocabulary row, drawn from the first pos_rows rows of P
    seed: int  # seed of the Xavier draw whose sigma_x the standardization uses
    pos_enc: str  # "model_input" (x sqrt(D) + P) or "unscaled" (x + P)


def make_context(
    shape: tuple[int, int], seed: int, pos_rows: int, pos_base: float, pos_enc: str = "model_input"
) -> Context:
    if pos_enc not in POS_ENC_MODES:
        raise ValueError(f"table4.pos_enc {pos_enc!r}; allowed: {', '.join(POS_ENC_MODES)}")
    table = sinusoidal_table(pos_rows, shape[1], base=pos_base)
    positions = np.random.default_rng(seed).integers(0, pos_rows, size=shape[0])
    return Context(table[positions].astype(np.float64), seed, pos_enc)


def scaled(x, ctx):
    """The model's input scaling: x sqrt(D)."""
    return x * np.sqrt(x.shape[1])


def pos_enc(x, ctx, p_factor: float = 1.0):
    """The model's input x sqrt(D) + P (x + P when pos_enc is unscaled), with P multiplied by p_factor."""
    base = scaled(x, ctx) if ctx.pos_enc == "model_input" else x
    return base + p_factor * ctx.p


def xavier_std(x, ctx):
    """The Pretrained_Xavier initializer itself: (x - mean) * sigma_x / sigma_p."""
    return pretrained_xavier(x, x.shape, np.random.default_rng(ctx.seed)).astype(np.float64)


def pos_enc_rescaled(x, ctx):
    """The last row: Pos. Enc. with P multiplied by sigma_p / sigma_x, i.e. x sqrt(D) + P sigma_p / sigma_x.

    sigma_p is the pre-trained layer's std, sigma_x that of the Xavier draw Xavier-Std uses. Xavier-Std & Pos. Enc.
    is (x - mean) sigma_x / sigma_p sqrt(D) + P = sigma_x / sigma_p ((x - mean) sqrt(D) + P sigma_p / sigma_x), and
    cosine ignores the factor: this row is that one without the centering, P as large against GloVe as after
    standardization (the paper: 11.1% against 12.9%). Scaling P, not x, keeps the identity in both pos_enc modes.
    """
    sigma_x = mean_std(xavier(None, x.shape, np.random.default_rng(ctx.seed)))[1]
    return pos_enc(x, ctx, mean_std(x)[1] / sigma_x)


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
    with open(path, encoding="utf-8") as f:
        lines = [(line, line.lower().split()) for line in f]
    return [tuple(words) for line, words in lines if not line.startswith(": ") and len(words) == 4]


def analogy_accuracy(vectors: np.ndarray, tokens, questions, n_special: int = len(SPECIALS), batch: int = 2048) -> dict:
    """3CosAdd over the non-special rows (tokens: the vocabulary in row order), matching gensim's
    case-insensitive evaluation: a word is its lowercased form, and its first row stands for it.

    Returns correct, applicable (all four words in the vocabulary), total questions and accuracy.
    """
    words = [t.lower() for t in list(tokens)[n_special:]]
    first = {w: row for row, w in reversed(list(enumerate(words)))}  # rows last to first: a word keeps its first row
    word_of_row = np.array([first[w] for w in words])
    ids = np.array([[first[w] for w in q] for q in questions if all(w in first for w in q)], dtype=np.int64)
    emb = np.asarray(vectors, dtype=np.float64)[n_special:]
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    unit = emb / np.where(norms == 0, 1, norms)  # a zero row stays zero: cosine 0 with everything

    correct = 0
    for start in range(0, len(ids), batch):
        q = ids[start : start + batch]  # columns a, b, c, d
        sims = (unit[q[:, 1]] - unit[q[:, 0]] + unit[q[:, 2]]) @ unit.T
        sims[(word_of_row == q[:, :3, None]).any(axis=1)] = -np.inf  # never answer with a, b or c
        correct += int((word_of_row[sims.argmax(axis=1)] == q[:, 3]).sum())
    applicable = len(ids)
    return {
        "accuracy": correct / applicable if applicable else np.nan,
        "correct": correct,
        "applicable": applicable,
        "total": len(questions),
    }


def evaluate(
    vectors: np.ndarray, tokens, questions, seed: int, pos_rows: int, pos_base: float, pos_enc: str = "model_input"
) -> pd.DataFrame:
    """One row per Table 4 transformation: accuracy (fraction), correct, applicable, total."""
    ctx = make_context(vectors.shape, seed, pos_rows, pos_base, pos_enc)
    rows = [
        {"transformation": t, **analogy_accuracy(transform(vectors, t, ctx), tokens, questions)} for t in TRANSFORMS
    ]
    return pd.DataFrame(rows)
