"""Table 4: 3CosAdd word analogy on an embedding layer after the transformations the model applies to it.

The question: does the input the transformer actually sees (scaled, standardized, plus position encoding)
still carry GloVe's analogy structure? Conventions follow gensim's `evaluate_word_analogies`, so counts can be
cross-checked against it: question "a b c d" asks a:b :: c:d; the prediction is the vocabulary word whose
vector has the highest cosine with unit(b) - unit(a) + unit(c), excluding a, b and c; a question counts only
when all four words (lowercased) are in the vocabulary.

"Pos. Enc." is the transformer's input, x sqrt(D) + P (config `table4.pos_enc: model_input`): the paper says
"embeddings are scaled before adding positional encodings", and only this reading leaves GloVe's accuracy
unchanged, as its Table 4 reports. `pos_enc: unscaled` is the literal reading x + P. Each word gets one row of
P, drawn at random from the first `table4.pos_rows` rows of the sinusoidal table; the paper does not give that
number, and the accuracy under Xavier-Std depends on it (hence `table4_sensitivity`).

Table 10 (beyond the paper) asks the same of the trained models: the accuracy of each run's embedding layer
before training (the layer it started from) and after (the state the run reports), raw and as the model's input.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from embinit.layers.initializers import mean_std, pretrained_xavier, xavier
from embinit.layers.position_table import sinusoidal_table
from embinit.reports.format import format_mean_std, markdown_table, write_csv_md
from embinit.reports.tables import read_final
from embinit.data.vocab import SPECIALS

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


def _source(config: dict, block: str, side: str, table: str) -> dict:
    """The first columns of each CSV row: the block's side, its embedding source and the source's display name
    (a stand-in says so in its display)."""
    source = config["blocks"][block]["sources"].get(side)
    if source is None:
        raise ValueError(f"{table}: side {side} of block {block} has no embedding source")
    return {"block": block, "side": side, "source": source, "source_display": config["sources"][source]["display"]}


class _Layer(NamedTuple):
    vectors: np.ndarray
    tokens: list[str]
    source: dict  # block, side, source, source_display: the first columns of each CSV row
    intro: str  # the Markdown sentence that says which layer and source


def _load_layer(vectors_npy, tokens_parquet, config: dict) -> _Layer:
    source = _source(config, config["table4"]["block"], config["table4"]["side"], "table4")
    vectors = np.load(vectors_npy)
    sidecar = pd.read_parquet(tokens_parquet, columns=["token", "matched"])
    if len(sidecar) != len(vectors):
        raise ValueError(f"{tokens_parquet}: {len(sidecar)} tokens for {len(vectors)} rows of {vectors_npy}")
    intro = (
        f"3CosAdd word analogy, {source['side']} layer of {source['block']} (N = {len(vectors):,}, "
        f"D = {vectors.shape[1]}); source: {source['source_display']} ({source['source']}), which has a vector for "
        f"{int(sidecar.matched.sum()):,} of the {len(vectors):,} rows."
    )
    return _Layer(vectors, sidecar.token.tolist(), source, intro)


def _pos_enc_note(spec: dict, pos_base: float) -> str:
    formula = "x sqrt(D) + P, the model's input" if spec["pos_enc"] == "model_input" else "x + P, unscaled"
    return (
        f"Pos. Enc.: {formula}; one random row of P (base {pos_base}) per word, seed {spec['seed']}; "
        f"(Pos. Enc. x σp/σx) adds P σp/σx instead of P."
    )


def _with_source(table: pd.DataFrame, source: dict) -> pd.DataFrame:
    """The table with the layer's `source` columns (block, side, source, source_display) first."""
    return table.assign(**source)[[*source, *table.columns]]


def table4(vectors_npy, tokens_parquet, questions_path, config: dict, csv_path, md_path) -> pd.DataFrame:
    """Table 4 on the layer of config `table4` (block, side, seed, pos_enc, pos_rows); P's base: `model.pos_base`."""
    spec, pos_base = config["table4"], config["model"]["pos_base"]
    layer, questions = _load_layer(vectors_npy, tokens_parquet, config), load_questions(questions_path)
    table = evaluate(layer.vectors, layer.tokens, questions, spec["seed"], spec["pos_rows"], pos_base, spec["pos_enc"])
    table = _with_source(table, layer.source)
    rows = [
        [r.transformation, f"{100 * r.accuracy:.1f}", f"{r.correct:,} / {r.applicable:,}"] for r in table.itertuples()
    ]
    md = (
        f"# Table 4\n\n{layer.intro} Accuracy over the {table.applicable.iloc[0]:,} of "
        f"{table.total.iloc[0]:,} questions whose four words are in the vocabulary. "
        f"{_pos_enc_note(spec, pos_base)} Rows of P drawn from: {spec['pos_rows']:,}.\n\n"
        + markdown_table(["Transformation", "Accuracy (%)", "Correct / applicable"], rows)
    )
    write_csv_md(csv_path, md_path, table, md)
    return table


def table4_sensitivity(vectors_npy, tokens_parquet, questions_path, config: dict, csv_path, md_path) -> pd.DataFrame:
    """Beyond the paper: Table 4 for each number of rows of P in config `table4.sensitivity_rows`."""
    spec, pos_base = config["table4"], config["model"]["pos_base"]
    layer, questions = _load_layer(vectors_npy, tokens_parquet, config), load_questions(questions_path)
    args = (layer.vectors, layer.tokens, questions, spec["seed"])
    parts = [evaluate(*args, n, pos_base, spec["pos_enc"]).assign(pos_rows=n) for n in spec["sensitivity_rows"]]
    table = pd.concat(parts, ignore_index=True)  # one row per (pos_rows, transformation)
    table = _with_source(table[["pos_rows", *table.columns.drop("pos_rows")]], layer.source)
    wide = table.pivot(index="transformation", columns="pos_rows", values="accuracy").loc[list(TRANSFORMS)]
    rows = [[name, *(f"{100 * a:.1f}" for a in accuracies)] for name, accuracies in wide.iterrows()]
    md = (
        f"# Table 4: sensitivity to the rows of P\n\n{layer.intro} Accuracy (%) over the "
        f"{table.applicable.iloc[0]:,} applicable questions when each word's row of P is drawn from the first "
        f"n rows of the table (the paper does not say how many). {_pos_enc_note(spec, pos_base)}\n\n"
        + markdown_table(["Transformation", *(f"n = {n:,}" for n in wide.columns)], rows)
    )
    write_csv_md(csv_path, md_path, table, md)
    return table


# Table 10's two readings of a layer: Table 4's transformation for each
TABLE10_REPRESENTATIONS = {"raw": "GloVe", "model_input": "GloVe & Pos. Enc."}
TABLE10_STAGES = ("before", "after")


def _layers(run, side: str, n_tokens: int) -> dict[str, np.ndarray]:
    """A run's layer of `side` before training (its starting layer) and after (its reported state)."""
    with np.load(run.trained) as trained:
        if side not in trained.files:
            raise KeyError(f"{run.trained}: no {side!r} layer (it holds {trained.files})")
        layers = {"before": np.load(run.initial), "after": trained[side]}
    for stage, layer in layers.items():
        if layer.shape != layers["before"].shape or len(layer) != n_tokens:
            raise ValueError(
                f"Table 10: {run.trained if stage == 'after' else run.initial} is {layer.shape}, the starting "
                f"layer {layers['before'].shape} and the vocabulary {n_tokens} rows"
            )
    return layers


def _table10_scores(runs: pd.DataFrame, side: str, tokens, questions, config: dict) -> pd.DataFrame:
    """Per run, stage (before / after training) and representation (raw / model input): the 3CosAdd result."""
    t4, rows = config["table4"], []
    for run in runs.itertuples():
        layers = _layers(run, side, len(tokens))
        ctx = make_context(layers["before"].shape, t4["seed"], t4["pos_rows"], config["model"]["pos_base"])
        rows += [
            {"initializer": run.initializer, "label": run.label, "seed": run.seed, "stage": stage,
             "representation": representation, "dim": layer.shape[1],
             **analogy_accuracy(transform(layer, name, ctx), tokens, questions)}
            for stage, layer in layers.items()
            for representation, name in TABLE10_REPRESENTATIONS.items()
        ]  # fmt: skip
    return pd.DataFrame(rows)


def _table10_markdown(table: pd.DataFrame, runs: pd.DataFrame, config: dict, n_tokens: int, dim: int) -> str:
    """The layout: a row per initializer, a column per representation x stage, cells mean (σ) in %."""
    t4, first = config["table4"], table.iloc[0]
    cells = [format_mean_std(100 * m, 100 * s) for m, s in zip(table.accuracy_mean, table.accuracy_std)]
    wide = table.assign(cell=cells).pivot_table(
        index=["label", "n_seeds"], columns=["representation", "stage"], values="cell", aggfunc="first", sort=False
    )  # the same seeds at every stage and representation
    columns = [(rep, stage) for rep in TABLE10_REPRESENTATIONS for stage in TABLE10_STAGES]
    rows = [[label, *values, str(n)] for (label, n), values in zip(wide.index, wide[columns].to_numpy().tolist())]
    epochs = ", ".join(str(e) for e in sorted({read_final(f)["epochs"] for f in runs.final}))
    header = ["Initializer", "Raw: before", "Raw: after", "Model input: before", "Model input: after", "Seeds"]
    return (
        f"# Table 10: word analogy before and after training\n\n"
        f"3CosAdd accuracy (%, mean (σ) over seeds) of the {first.side} embedding layer of {first.block} "
        f"(N = {n_tokens:,}, D = {dim}) before training (the layer the run started from) and after (the state the "
        "run reports: translation the lowest-validation-loss epoch, classification the best-validation-accuracy "
        f"epoch), over the {int(first.applicable):,} of {int(first.total):,} questions whose four words are in the "
        f"vocabulary. Source: {first.source_display} ({first.source}). Raw: the layer itself (Table 4's GloVe "
        "row); model input: x sqrt(D) + P, one random row of P (base "
        f"{config['model']['pos_base']}) per word drawn from the first {t4['pos_rows']:,} rows with seed "
        f"{t4['seed']} (Table 4's GloVe & Pos. Enc. row). Budget: {epochs} epochs; seeds per initializer: "
        + ", ".join(f"{label} {n}" for label, n in wide.index)
        + f" (variant {runs.variant.iloc[0]}).\n\n"
        + markdown_table(header, rows)
    )


def table10(runs: pd.DataFrame, tokens_parquet, questions_path, config: dict, csv_path, md_path) -> pd.DataFrame:
    """Table 10 (beyond the paper): Table 4's 3CosAdd accuracy on each trained model's embedding layer.

    `runs` are the run sheet's rows of Table 10 with `final` (final.json), `trained` (embeddings.npz, key: the
    side) and `initial` (the layer the run started from); `tokens_parquet` is the block side's
    pretrained_<side>.parquet (its `token` column names each row). Each layer is read raw and as the model's input
    x sqrt(D) + P, P drawn as Table 4 draws it (config `table4` seed and pos_rows, base `model.pos_base`). One CSV
    row per (initializer, stage before/after, representation): mean and std over seeds.
    """
    side, block = config["table10"]["side"], runs.block.iloc[0]
    source = _source(config, block, side, "table10")
    tokens = pd.read_parquet(tokens_parquet, columns=["token"]).token.tolist()
    scores = _table10_scores(runs, side, tokens, load_questions(questions_path), config)
    table = (
        scores.groupby(["initializer", "label", "stage", "representation"], sort=False)  # the run sheet's order
        .agg(
            accuracy_mean=("accuracy", "mean"),
            accuracy_std=("accuracy", "std"),
            n_seeds=("seed", "nunique"),
            applicable=("applicable", "first"),
            total=("total", "first"),
        )
        .reset_index()
    )
    table = _with_source(table, source)
    write_csv_md(csv_path, md_path, table, _table10_markdown(table, runs, config, len(tokens), scores.dim.iloc[0]))
    return table
