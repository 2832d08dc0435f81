"""Table 4 (3CosAdd word analogy under the paper's transformations, embinit.layers.analogy) on the pre-trained
layer, its sensitivity to the rows of P, and Table 10 (beyond the paper): the same accuracy of each trained run's
layer before training (the layer it started from) and after (the state the run reports), raw and as the model's
input.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from embinit.layers.analogy import TRANSFORMS, analogy_accuracy, evaluate, load_questions, make_context, transform
from embinit.reports.format import format_mean_std, markdown_table, write_csv_md
from embinit.reports.tables import read_final


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
