"""The paper's result tables (1, 3, 5, 7) and, beyond the paper, Tables 9 and 11, from training runs.

Each table receives exactly its runs: the run sheet's rows (embinit.workflow.runsheet), with a `final` column naming each
run's final.json; it never re-selects. Means and sample stds (ddof=1, blank with one seed) are over seeds. Every
CSV row names its block and the embedding sources that block used (name and display), so a stand-in source (e.g.
`glove6b50d`) is never read as the paper's; row labels are the sheet's ("GloVe_Xavier").
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from embinit.reports.format import TASK_DISPLAY, format_mean_std, markdown_table, write_csv_md

METRIC_DISPLAY = {"accuracy_pct": "Acc", "mismatched_accuracy_pct": "Mismatch", "bleu": "BLEU"}
SUMMARY_KEYS = ["family", "block", "task", "variant", "initializer", "label", "sources", "source_display"]


def read_final(path) -> dict:
    return json.loads(Path(path).read_text())


def field(path, run: dict, key: str):
    """run[key], failing with the file's name: a missing key usually means a run from an older trainer."""
    try:
        return run[key]
    except KeyError:
        raise KeyError(f"{path}: final.json has no key {key!r}") from None


class Reference(NamedTuple):
    """The runs a cell is compared with: those whose `column` (initializer or variant) is `value`."""

    column: str
    value: str

    @property
    def diff_column(self) -> str:
        return f"diff_vs_{self.value.lower()}"


XAVIER = Reference("initializer", "Xavier")


def t_interval(mean, std, n, confidence: float = 0.95):
    """The t-interval of a mean of `n` values of sample std `std` (scalars or Series); NaN where std is."""
    half = stats.t.interval(confidence, n - 1)[1] * std / np.sqrt(n)  # (t σ) / √n, not t (σ / √n): same last digits
    return mean - half, mean + half


def paired_difference(d) -> dict:
    """The mean of per-seed differences `d` with its paired t-test p-value and 95% t-interval (degenerate when
    every seed differs by the same amount; undefined below 2 pairs). The same interval judges the findings
    (embinit.reports.comparison), so a Δ cell and a verdict never disagree."""
    d = np.asarray(d, dtype=np.float64)
    out = {"diff": d.mean() if len(d) else np.nan, "n_pairs": len(d), "p_paired_t": np.nan}
    out.update(ci_low=np.nan, ci_high=np.nan)
    if len(d) >= 2:
        with warnings.catch_warnings():  # constant differences make scipy warn; its p-value (0 or NaN) stands
            warnings.simplefilter("ignore", RuntimeWarning)
            out["p_paired_t"] = float(stats.ttest_1samp(d, 0).pvalue)
        out["ci_low"], out["ci_high"] = t_interval(d.mean(), d.std(ddof=1), len(d))
    return out


def verdict_of(low: float, high: float, sign: int = +1) -> str:
    """A claimed difference of sign `sign` judged by its 95% interval: holds or contradicted when the interval
    excludes zero on the claimed or the other side, undecided when it holds zero or is undefined (NaN)."""
    if low > 0 or high < 0:
        return "holds" if (low > 0) == (sign > 0) else "contradicted"
    return "undecided"


def compare_to_xavier(values: pd.Series, xavier: pd.Series) -> dict:
    """Paired (by seed) difference to Xavier (both series indexed by seed): `paired_difference` of the seeds both
    have, as columns diff_vs_xavier, n_pairs, p_paired_t, ci_low, ci_high."""
    pairs = pd.concat([values, xavier], axis=1, join="inner").dropna()
    out = paired_difference(pairs.iloc[:, 0] - pairs.iloc[:, 1])
    return {"diff_vs_xavier": out.pop("diff"), **out}


def _percent(path, value: float) -> float:
    if not 0 <= value <= 1:
        raise ValueError(f"{path}: accuracy {value} is not a fraction in [0, 1]")
    return 100 * value


def result_metrics(path, run: dict) -> list[tuple[str, float, int]]:
    """Table 1's (metric, value, epoch) of one run: accuracies in %, paper BLEU and sacreBLEU (CSV only); MNLI adds
    the best mismatched accuracy with its own epoch, as the paper reports it."""
    epoch = field(path, run, "best_epoch")
    if field(path, run, "kind") == "translation":
        return [
            ("bleu", field(path, run, "test_paper_bleu"), epoch),
            ("sacrebleu", field(path, run, "test_sacrebleu"), epoch),
        ]
    metrics = [("accuracy_pct", _percent(path, field(path, run, "best_valid_acc")), epoch)]
    if run["task"] == "mnli":
        mismatched = _percent(path, field(path, run, "best_test_acc"))
        metrics.append(("mismatched_accuracy_pct", mismatched, field(path, run, "best_test_epoch")))
    return metrics


def table3_metrics(path, run: dict) -> list[tuple[str, float, int]]:
    loss = ("best_valid_loss", field(path, run, "best_valid_loss"), field(path, run, "best_epoch"))
    return [loss, *result_metrics(path, run)]


# Table 3's mechanism columns: each side's |x √D| / |P| (train.mechanism), the words' share of its input
RATIOS = ["input_ratio_encoder", "input_ratio_decoder"]
RATIO_HEADER = "‖x√D‖ / ‖P‖, encoder / decoder"  # norms, not pipes, which would split a Markdown cell


def input_ratios(long: pd.DataFrame) -> pd.DataFrame:
    """Rows of `long`'s form, per run with a position encoding: each side's |x √D| / |P| at the run's best epoch, from
    its metrics.parquet. None for a run without P, or where train.mechanism was off (no such column)."""
    rows = []
    for run in long[(long.metric == "bleu") & (long.pos_encoding != "none")].to_dict("records"):
        metrics = pd.read_parquet(run["metrics"]).set_index("epoch")
        if run["best_epoch"] not in metrics.index:
            raise ValueError(f"{run['metrics']}: no row for epoch {run['best_epoch']}, its final.json's best_epoch")
        for metric in RATIOS:
            if metric in metrics and pd.notna(value := metrics.at[run["best_epoch"], metric]):
                rows.append({**run, "metric": metric, "value": float(value)})
    return pd.DataFrame(rows, columns=long.columns)


def per_seed(runs: pd.DataFrame, metrics=result_metrics) -> pd.DataFrame:
    """One row per (run, metric): the sheet's columns, `metric`, `value` and the `best_epoch` it was read at.
    A run listed twice is an error."""
    dup = runs.duplicated(["block", "initializer", "variant", "seed"], keep=False)
    if dup.any():
        raise ValueError(f"the same block/initializer/variant/seed appears twice: {sorted(set(runs.final[dup]))}")
    rows = [
        {**row, "metric": m, "value": v, "best_epoch": epoch}
        for row in runs.to_dict("records")
        for m, v, epoch in metrics(row["final"], read_final(row["final"]))
    ]
    return pd.DataFrame(rows, columns=[*runs.columns, "metric", "value", "best_epoch"])


def summarize(long: pd.DataFrame, versus: Reference = XAVIER):
    """Per block, variant, initializer and metric: mean, std, n_seeds, mean best epoch, and the paired comparison
    to the reference `versus` of the same block and metric: by default Xavier of the same variant (columns
    `diff_vs_xavier`, ...); Reference("variant", "base") compares each variant with the base model of the same
    initializer (`diff_vs_base`)."""
    if long.empty:
        raise ValueError("no runs match this table (check the inputs' blocks, initializers and variants)")
    other = "variant" if versus.column == "initializer" else "initializer"
    rows = []
    for _, group in long.groupby(["block", "variant", "initializer", "metric"], sort=False):
        first, values = group.iloc[0], group.set_index("seed")["value"]
        same = (long.block == first.block) & (long.metric == first.metric) & (long[other] == first[other])
        base = long[same & (long[versus.column] == versus.value)].set_index("seed")["value"]
        comparison = compare_to_xavier(values, base if first[versus.column] != versus.value else base.iloc[:0])
        if versus != XAVIER:
            comparison[versus.diff_column] = comparison.pop("diff_vs_xavier")
        stats = {"metric": first.metric, "mean": values.mean(), "std": values.std(ddof=1), "n_seeds": len(values)}
        rows.append(
            {**first[SUMMARY_KEYS].to_dict(), **stats, "mean_best_epoch": group.best_epoch.mean(), **comparison}
        )
    return pd.DataFrame(rows)


def _write_with_sources(summary: pd.DataFrame, csv_path, md_path, title: str, body: str) -> pd.DataFrame:
    """A table of seeded results: the summary as CSV; as Markdown the title, the body and, so that a stand-in is
    never read as the paper's source, the sources each block used."""
    # seeds per cell: "3", or "2-3" when the block's cells differ
    seeds = summary.groupby("block", sort=False).n_seeds.agg(lambda n: "-".join(map(str, sorted({n.min(), n.max()}))))
    sources = "\n".join(
        f"- {r.block} ({TASK_DISPLAY.get(r.task, r.task)}, {r.family} rows): {r.source_display} [{r.sources}]; "
        f"seeds per cell: {seeds[r.block]}"
        for r in summary.drop_duplicates("block").itertuples()
    )
    write_csv_md(csv_path, md_path, summary, f"# {title}\n\n{body}\nSources actually used:\n\n{sources}\n")
    return summary


def paired_cell(c, diff: float) -> str:
    """'+1.2 [-0.3, +2.8] p=0.041': the paired difference, its 95% t-interval and t-test p; '-' without pairs."""
    if pd.isna(diff):
        return "-"
    ci = "" if pd.isna(c.ci_low) else f" [{c.ci_low:+.1f}, {c.ci_high:+.1f}]"
    p = "" if pd.isna(c.p_paired_t) else f" p={c.p_paired_t:.3f}" if c.p_paired_t >= 0.001 else " p<0.001"
    return f"{diff:+.1f}{ci}{p}"


def _wide(summary: pd.DataFrame, render, epoch: bool) -> pd.DataFrame:
    """Table 1's grid: a row per family x initializer (sheet order, with its label), per task a column per metric
    (its display name, "Match" for MNLI's matched accuracy) and, with `epoch`, the tasks' mean best epochs
    ("m / mm")."""
    shown = summary[summary.metric.isin(list(METRIC_DISPLAY))]
    shown = shown.assign(cell=[render(c) for c in shown.itertuples()], epoch=shown.mean_best_epoch.map("{:.1f}".format))
    tasks = [t for t in TASK_DISPLAY if t in set(shown.task)] + sorted(set(shown.task) - set(TASK_DISPLAY))
    order = {"task": tasks, "metric": list(METRIC_DISPLAY), "family": None, "initializer": None}  # None: as seen
    shown = shown.assign(**{k: pd.Categorical(shown[k], v or pd.unique(shown[k])) for k, v in order.items()})
    keys = {"index": ["family", "initializer", "label"], "columns": ["task", "metric"]}  # a label per row
    grid = shown.pivot_table(values=["cell", "epoch"], **keys, aggfunc="first", observed=True)
    columns = {}
    for task in tasks:
        metrics = [m for m in METRIC_DISPLAY if ("cell", task, m) in grid.columns]
        for m in metrics:
            name = "Match" if m == "accuracy_pct" and len(metrics) > 1 else METRIC_DISPLAY[m]
            columns[f"{TASK_DISPLAY.get(task, task)} {name}"] = grid["cell", task, m].fillna("-")
        if epoch:
            columns[f"{task} epoch"] = grid["epoch"][task][metrics].fillna("-").agg(" / ".join, axis=1)
    return pd.DataFrame(columns, index=grid.index)


def _grid_markdown(summary: pd.DataFrame, render, suffix: str, epoch: bool) -> str:
    """Table 1's layout with a bold header row per family; labels are the sheet's."""
    wide = _wide(summary, render, epoch)
    header = ["Embedding"] + ["Epoch" if c.endswith(" epoch") else c + suffix for c in wide.columns]
    rows = []
    for family, part in wide.groupby(level="family", sort=False, observed=True):
        rows.append([f"**{family}**"] + [""] * len(wide.columns))
        rows += part.droplevel(["family", "initializer"]).reset_index().to_numpy().tolist()  # label, cells
    return markdown_table(header, rows)


def result_table(runs: pd.DataFrame, csv_path, md_path, title: str, references=()):
    """Table 1 (or Table 7, the Xavier_Pretrained control, in its layout): per block and initializer its metrics
    over seeds and the paired difference to Xavier. `references` are initializers whose runs serve only as the
    reference, not as rows (Table 7 lists the control alone)."""
    summary = summarize(per_seed(runs))
    summary = summary[~summary.initializer.isin(references)].reset_index(drop=True)
    body = (
        "Accuracy in %, BLEU as is: mean (σ) over seeds; Epoch: mean best epoch (1-based).\n\n"
        + _grid_markdown(summary, lambda c: format_mean_std(c.mean, c.std), " (σ)", epoch=True)
        + "\nBeyond the paper: difference to Xavier of the same block, paired by seed: "
        "mean [95% t-interval], paired t-test p.\n\n"
        + _grid_markdown(summary, lambda c: paired_cell(c, c.diff_vs_xavier), " Δ", epoch=False)
    )
    return _write_with_sources(summary, csv_path, md_path, title, body)


# Table 3's cells (embedding trainable, position encoding) by the names of config.yaml's variants for them
TABLE3_CELLS = {(True, True): "base", (True, False): "nopos", (False, True): "frozen", (False, False): "nopos_frozen"}


def table3_cell(variant: str, embedding_trainable, pos_encoding: str) -> str:
    """The paper's Table 3 cell a run fills, whatever its variant's name (frozen_legacy fills `frozen`); a variant
    that trains one side only fills a cell of its own."""
    if embedding_trainable not in (True, False):
        return variant
    return TABLE3_CELLS[bool(embedding_trainable), pos_encoding != "none"]


def table3(runs: pd.DataFrame, csv_path, md_path) -> pd.DataFrame:
    """Table 3: initializers x variants (embedding trainable x position encoding), lowest validation loss, test BLEU
    and each side's |x √D| / |P| at the best epoch (`input_ratios`); `cell` names the paper's cell each variant fills."""
    long = per_seed(runs, table3_metrics)
    ratios = input_ratios(long)
    summary = summarize(pd.concat([long, ratios], ignore_index=True) if len(ratios) else long)
    switches = runs.drop_duplicates("variant").set_index("variant")
    summary.insert(4, "embedding_trainable", summary.variant.map(switches.embedding_trainable))
    summary.insert(5, "pos_encoding", summary.variant.map(switches.pos_encoding != "none"))
    cells = {v: table3_cell(v, s.embedding_trainable, s.pos_encoding) for v, s in switches.iterrows()}
    summary.insert(6, "cell", summary.variant.map(cells))
    cell = summary.set_index(["initializer", "variant", "metric"])
    rows = []
    for init, variant in runs[["initializer", "variant"]].drop_duplicates().itertuples(index=False):
        loss, bleu = cell.loc[(init, variant, "best_valid_loss")], cell.loc[(init, variant, "bleu")]
        trainable = {True: "yes", False: "no"}.get(loss.embedding_trainable, f"{loss.embedding_trainable} only")
        cells = [
            f"{loss['mean']:.2f} ({loss.mean_best_epoch:.1f})",
            format_mean_std(bleu["mean"], bleu["std"]),
            str(int(bleu.n_seeds)),
        ]
        ratio = [
            f"{cell.loc[(init, variant, m)]['mean']:.2f}" if (init, variant, m) in cell.index else "-" for m in RATIOS
        ]
        cells.append(" / ".join(ratio) if set(ratio) != {"-"} else "-")
        rows.append([loss.label, trainable, "yes" if loss.pos_encoding else "no", *cells])
    header = [
        "Embedding",
        "Emb. trainable",
        "Pos. enc.",
        "Lowest val loss (epoch)",
        "Test BLEU (σ)",
        "Seeds",
        RATIO_HEADER,
    ]
    body = (
        "Mean over a cell's seeds (Seeds: how many); epoch = mean best epoch (1-based). ‖x√D‖ / ‖P‖: the scaled\n"
        "embedding's size against the position encoding's in each side's input, at the best epoch (train.mechanism;\n"
        "below 1, P swamps the words); - without P.\n\n" + markdown_table(header, rows)
    )
    sped = runs[runs.speed_options.fillna("") != ""] if "speed_options" in runs else runs.iloc[:0]
    if len(sped):  # a speed option is in a run's identity: its cell's seeds are not all the same run kind
        listed = "; ".join(f"{r.label} {r.variant} seed {r.seed} ({r.speed_options})" for r in sped.itertuples())
        body += f"\nTrained with a speed option (the same loss, other dropout draws): {listed}.\n"
    return _write_with_sources(summary, csv_path, md_path, f"Table 3 ({', '.join(pd.unique(runs.block))})", body)


@dataclass(frozen=True)
class Crossed:
    """A table of initializers crossed with one variant switch: its title, the switch whose values group the rows
    (and the header naming it), the reference each Δ is against and a note on the Δ's meaning."""

    title: str
    switch: str
    setting: str
    versus: Reference
    why: str


CROSSED = {
    "table9": Crossed(
        title="Table 9 (beyond the paper): position encodings",
        switch="pos_encoding",
        setting="Position encoding",
        versus=XAVIER,
        why="Δ against Xavier with the same position encoding. sinusoidal and learned add P to the scaled embedding; "
        "rotary (queries and keys rotated) and relative (a learned bias on the attention scores) leave it alone; "
        "none has no position information.",
    ),
    "table11": Crossed(
        title="Table 11 (beyond the paper): output-embedding coupling",
        switch="output_embedding",
        setting="Output embedding",
        versus=Reference("variant", "base"),
        why="Δ against the untied model (variant base) of the same initializer and seed.",
    ),
}


def crossed_table(runs: pd.DataFrame, name: str, csv_path, md_path):
    """Table 9 (does a pre-trained layer still lose once the position encoding no longer adds to the embedding?)
    or Table 11 (the translator's output projection untied, tied or initialized from the decoder's layer): a row
    per variant x initializer, per block its main metric and the paired Δ against the reference of CROSSED."""
    table = CROSSED[name]
    runs = runs.sort_values("variant", key=lambda v: pd.factorize(v)[0], kind="stable")  # variants as first seen
    summary = summarize(per_seed(runs), table.versus)
    switches = runs.drop_duplicates("variant").set_index("variant")[table.switch]
    summary.insert(4, table.switch, summary.variant.map(switches))
    translators = summary.block[summary.metric == "bleu"]
    main = summary[summary.metric == np.where(summary.block.isin(translators), "bleu", "accuracy_pct")]  # per block
    cells = main.assign(
        value=[format_mean_std(c.mean, c.std) for c in main.itertuples()],
        delta=[paired_cell(c, getattr(c, table.versus.diff_column)) for c in main.itertuples()],
    )
    blocks, shown = pd.unique(runs.block), runs.drop_duplicates(["variant", "initializer"])
    grid = cells.pivot_table(
        index=["variant", "initializer"], columns="block", values=["value", "delta"], aggfunc="first"
    )
    grid = grid.reindex(
        index=pd.MultiIndex.from_frame(shown[["variant", "initializer"]]),
        columns=[(cell, b) for b in blocks for cell in ("value", "delta")],
    ).set_axis(pd.MultiIndex.from_frame(shown[[table.switch, "label"]]))
    names = main.drop_duplicates("block").set_index("block")
    metrics = [f"{TASK_DISPLAY.get(names.task[b], b)} {METRIC_DISPLAY[names.metric[b]]}" for b in blocks]
    header = [table.setting, "Embedding", *(f"{metric} {cell}" for metric in metrics for cell in ("(σ)", "Δ"))]
    rows = grid.fillna("-").reset_index().to_numpy().tolist()
    body = (
        f"{table.why}\n\nAccuracy in %, BLEU as is (paper BLEU): mean (σ) over seeds. Δ: the paired difference (by seed) "
        "with its 95% t-interval and paired t-test p.\n\n" + markdown_table(header, rows)
    )
    return _write_with_sources(summary, csv_path, md_path, table.title, body)


def _single(block: str, name: str, values: pd.Series):
    """A setting every run of a block must share; differing values mean runs of different configs."""
    unique = values.dropna().unique()
    if len(unique) > 1:
        raise ValueError(f"block {block}: runs disagree on {name}: {sorted(unique)}")
    return unique[0] if len(unique) else np.nan


NAMES = ["block", "task", "family", "sources", "source_display"]
SIZES = ["params", "epochs", "batch_size", "vocab_encoder", "vocab_decoder", "train_size"]


def _sizes(row: dict) -> dict:
    """A run's Table 5 entries: its block's names, then the sizes and minutes its final.json reports."""
    path, final = row["final"], read_final(row["final"])
    vocab = field(path, final, "vocab_sizes")
    reported = {k: field(path, final, k) for k in ("params", "epochs", "batch_size", "train_size")}
    vocab_sizes = {"vocab_encoder": vocab["encoder"], "vocab_decoder": vocab.get("decoder")}
    minutes = field(path, final, "train_minutes_per_epoch")
    return {**{k: row[k] for k in NAMES}, **reported, **vocab_sizes, "train_minutes_per_epoch": minutes}


def table5(runs: pd.DataFrame, csv_path, md_path) -> pd.DataFrame:
    """Table 5: per block the settings and sizes its runs report; minutes per epoch averaged over runs."""
    table = []
    for block, part in pd.DataFrame([_sizes(row) for row in runs.to_dict("records")]).groupby("block", sort=False):
        minutes = part.train_minutes_per_epoch
        table.append(
            part.iloc[0][NAMES].to_dict()
            | {name: _single(block, name, part[name]) for name in SIZES}
            | {"train_minutes_per_epoch": minutes.mean(), "train_minutes_per_epoch_std": minutes.std(ddof=1)}
            | {"n_runs": len(part)}
        )
    table = pd.DataFrame(table)
    decoder = table.vocab_decoder.map(lambda v: "" if pd.isna(v) else f" / {v:,.0f}")
    shown = {
        "Block": table.block,
        "Sources": table.source_display,
        "Params": table.params.map(lambda p: f"{p / 1e6:.1f}M"),
        "Epochs": table.epochs.map(lambda e: str(int(e))),
        "Batch size": table.batch_size.map(lambda b: str(int(b))),
        "Vocab (enc / dec)": table.vocab_encoder.map("{:,.0f}".format) + decoder,
        "Train size": table.train_size.map("{:,.0f}".format),
        "Minutes / epoch": table.train_minutes_per_epoch.map("{:.2f}".format),
    }
    md = (
        "# Table 5\n\nFrom the runs' own final.json; minutes per epoch: training time only (validation "
        "excluded, as in the paper), mean over runs (hardware-dependent).\n\n"
        + markdown_table(list(shown), pd.DataFrame(shown).to_numpy().tolist())
    )
    write_csv_md(csv_path, md_path, table, md)
    return table
