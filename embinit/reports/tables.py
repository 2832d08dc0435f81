"""The paper's result tables (1, 3, 5, 7), aggregated from training runs (Figure 1: embinit.reports.figures).

A run is `(path, final.json dict)`. Means and sample stds (ddof=1, blank with one seed) are over seeds. Every
CSV row names its block and the embedding sources that block actually used (name and display), so a stand-in
source (e.g. `glove6b50d`) is never read as the paper's. Row labels follow the paper ("GloVe_Xavier"), with
the block's `family` as the source name; the Markdown lists the sources under each table.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from embinit.layers.initializers import display_name
from embinit.reports.format import TASK_DISPLAY, format_mean_std, markdown_table, write_csv_md

METRIC_DISPLAY = {"accuracy_pct": "Acc", "mismatched_accuracy_pct": "Mismatch", "bleu": "BLEU"}
RUN_KEYS = ["block", "task", "kind", "initializer", "seed", "variant"]


def load_runs(paths) -> list[tuple[str, dict]]:
    """Read final.json files into (path, dict) pairs."""
    return [(str(p), json.loads(Path(p).read_text())) for p in paths]


def field(path: str, run: dict, key: str):
    """run[key], failing with the file's name: a missing key usually means a run from an older trainer."""
    try:
        return run[key]
    except KeyError:
        raise KeyError(f"{path}: final.json has no key {key!r}") from None


def block_sources(config: dict, block: str) -> tuple[str, str]:
    """('encoder=glove_de; decoder=glove', 'encoder=GloVe; decoder=GloVe'): the sources a block used."""
    if block not in config["blocks"]:
        raise KeyError(f"block {block!r} of a run is not in config `blocks`")
    sides = config["blocks"][block]["sources"].items()
    names = "; ".join(f"{side}={src or 'none'}" for side, src in sides)
    displays = "; ".join(
        f"{side}={config['sources'][src]['display'] if src else 'none (Xavier)'}" for side, src in sides
    )
    return names, displays


def compare_to_xavier(values: pd.Series, xavier: pd.Series, n_boot: int = 10_000, seed: int = 0) -> dict:
    """Paired (by seed) difference to Xavier: mean, paired t-test p-value and percentile bootstrap 95% CI.

    Both series are indexed by seed. The CI is scipy's percentile bootstrap of the mean of the per-seed
    differences (seeds resampled as pairs, `n_boot` resamples) with an RNG seeded by `seed`, so it is
    deterministic. With fewer than 2 pairs only the mean difference is defined.
    """
    pairs = pd.concat([values, xavier], axis=1, join="inner").dropna()
    d = (pairs.iloc[:, 0] - pairs.iloc[:, 1]).to_numpy(dtype=np.float64)
    out = {
        "diff_vs_xavier": d.mean() if len(d) else np.nan,
        "n_pairs": len(d),
        "p_paired_t": np.nan,
        "ci_low": np.nan,
        "ci_high": np.nan,
    }
    if len(d) >= 2:
        with warnings.catch_warnings():  # constant differences make scipy warn; its p-value (0 or NaN) stands
            warnings.simplefilter("ignore", RuntimeWarning)
            out["p_paired_t"] = float(stats.ttest_rel(pairs.iloc[:, 0], pairs.iloc[:, 1]).pvalue)
        ci = stats.bootstrap(
            (d,),
            np.mean,
            n_resamples=n_boot,
            method="percentile",
            rng=np.random.default_rng(seed),
        ).confidence_interval
        out["ci_low"], out["ci_high"] = float(ci.low), float(ci.high)
    return out


def _percent(path: str, value: float) -> float:
    if not 0 <= value <= 1:
        raise ValueError(f"{path}: accuracy {value} is not a fraction in [0, 1]")
    return 100 * value


def _table1_metrics(path: str, run: dict) -> list[tuple[str, float, int]]:
    """Table 1's (metric, value, epoch) of one run: accuracies in %, BLEU as is; MNLI adds the best
    mismatched accuracy with its own epoch, as the paper reports it."""
    if field(path, run, "kind") == "translation":
        return _bleu(path, run)
    epoch = field(path, run, "best_epoch")
    metrics = [("accuracy_pct", _percent(path, field(path, run, "best_valid_acc")), epoch)]
    if run["task"] == "mnli":
        metrics.append(
            (
                "mismatched_accuracy_pct",
                _percent(path, field(path, run, "best_test_acc")),
                field(path, run, "best_test_epoch"),
            )
        )
    return metrics


def _bleu(path: str, run: dict) -> list[tuple[str, float, int]]:
    """Paper BLEU (the tables' BLEU column) and standard sacreBLEU (in the CSV only)."""
    epoch = field(path, run, "best_epoch")
    return [
        ("bleu", field(path, run, "test_paper_bleu"), epoch),
        ("sacrebleu", field(path, run, "test_sacrebleu"), epoch),
    ]


def _table3_metrics(path: str, run: dict) -> list[tuple[str, float, int]]:
    return [("best_valid_loss", field(path, run, "best_valid_loss"), field(path, run, "best_epoch")), *_bleu(path, run)]


def _long(runs, metrics, keep) -> pd.DataFrame:
    """One row per (run, metric) for the runs `keep(run)` selects, with the epoch that metric was read at;
    a seed run twice is an error."""
    rows = []
    for path, run in runs:
        base = {key: field(path, run, key) for key in RUN_KEYS}
        if keep(base):
            rows += [
                {**base, "path": path, "metric": m, "value": v, "best_epoch": epoch}
                for m, v, epoch in metrics(path, run)
            ]
    long = pd.DataFrame(rows, columns=RUN_KEYS + ["path", "metric", "value", "best_epoch"])
    dup = long.duplicated(["block", "initializer", "variant", "seed", "metric"], keep=False)
    if dup.any():
        raise ValueError(f"the same block/initializer/variant/seed appears twice: {sorted(set(long.path[dup]))}")
    return long


def summarize(
    long: pd.DataFrame,
    config: dict,
    n_boot: int = 10_000,
    boot_seed: int = 0,
    versus: tuple[str, str] = ("initializer", "Xavier"),
) -> pd.DataFrame:
    """Per block, variant, initializer and metric: mean, std, n_seeds, mean best epoch, and the paired comparison
    to the reference `versus` = (column, value) of the same block and metric: by default Xavier of the same
    variant (columns `diff_vs_xavier`, ...); ("variant", "base") compares each variant with the base model of
    the same initializer (`diff_vs_base`)."""
    if long.empty:
        raise ValueError("no runs match this table (check the inputs' blocks, initializers and variants)")
    column, reference = versus
    other = "variant" if column == "initializer" else "initializer"
    keys = ["block", "variant", "initializer", "metric"]
    rows = []
    for (block, variant, init, metric), group in long.groupby(keys, sort=False):
        values = group.set_index("seed")["value"]
        cell = {"initializer": init, "variant": variant}
        same = (long.block == block) & (long.metric == metric) & (long[other] == cell[other])
        base = long[same & (long[column] == reference)].set_index("seed")["value"]
        comparison = compare_to_xavier(values, base if cell[column] != reference else base.iloc[:0], n_boot, boot_seed)
        if versus != ("initializer", "Xavier"):
            comparison[f"diff_vs_{reference.lower()}"] = comparison.pop("diff_vs_xavier")
        family = config["blocks"][block]["family"]
        sources, display = block_sources(config, block)
        rows.append(
            {
                "family": family,
                "block": block,
                "task": group.task.iloc[0],
                "variant": variant,
                "initializer": init,
                "label": display_name(init, family),
                "sources": sources,
                "source_display": display,
                "metric": metric,
                "mean": values.mean(),
                "std": values.std(ddof=1),
                "n_seeds": len(values),
                "mean_best_epoch": group.best_epoch.mean(),
                **comparison,
            }
        )
    return pd.DataFrame(rows)


def ordered(values, order) -> list:
    """The distinct `values` in the order of `order`, anything not listed there at the end."""
    present = list(dict.fromkeys(values))
    return [v for v in dict.fromkeys(order) if v in present] + [v for v in present if v not in order]


def _sources_note(summary: pd.DataFrame) -> str:
    blocks = summary.drop_duplicates("block")
    lines = [
        f"- {r.block} ({TASK_DISPLAY.get(r.task, r.task)}, {r.family} rows): {r.source_display} "
        f"[{r.sources}]; seeds per cell: {_seed_range(summary[summary.block == r.block])}"
        for r in blocks.itertuples()
    ]
    return "Sources actually used:\n\n" + "\n".join(lines) + "\n"


def _seed_range(part: pd.DataFrame) -> str:
    low, high = part.n_seeds.min(), part.n_seeds.max()
    return str(low) if low == high else f"{low}-{high}"


def _layout(summary: pd.DataFrame, config: dict, title: str) -> str:
    """Table 1's layout: a row per family x initializer; per task its metrics (sigma) and mean best epoch."""
    clash = summary.groupby(["family", "task"]).block.nunique()
    if (clash > 1).any():
        raise ValueError(
            f"several blocks fill the same family/task cell: {list(clash[clash > 1].index)}; "
            "aggregate one block per family and task"
        )
    tasks = ordered(summary.task, list(TASK_DISPLAY))
    families = ordered(summary.family, [b["family"] for b in config["blocks"].values()])
    cell = summary.set_index(["family", "task", "initializer", "metric"])
    shown = summary.metric[summary.metric.isin(list(METRIC_DISPLAY))]  # sacreBLEU is in the CSV only
    task_metrics = {t: ordered(shown[summary.task == t], list(METRIC_DISPLAY)) for t in tasks}

    def table(render, suffix: str, epoch: bool) -> str:
        """One row per family x initializer; per task a cell per metric, then (optionally) the epoch."""
        header = ["Embedding"]
        for task in tasks:
            for metric in task_metrics[task]:
                name = "Match" if metric == "accuracy_pct" and len(task_metrics[task]) > 1 else METRIC_DISPLAY[metric]
                header.append(f"{TASK_DISPLAY.get(task, task)} {name}{suffix}")
            header += ["Epoch"] if epoch else []
        rows = []
        for family in families:
            rows.append([f"**{family}**"] + [""] * (len(header) - 1))
            for init in ordered(summary.initializer[summary.family == family], config["initializers"]):
                row = [display_name(init, family)]
                for task in tasks:
                    found = [
                        cell.loc[(family, task, init, m)] if (family, task, init, m) in cell.index else None
                        for m in task_metrics[task]
                    ]
                    row += [render(c) if c is not None else "-" for c in found]
                    if epoch:  # MNLI: "m / mm", each metric's own mean best epoch
                        row.append(" / ".join(f"{c.mean_best_epoch:.1f}" if c is not None else "-" for c in found))
                rows.append(row)
        return markdown_table(header, rows)

    return (
        f"# {title}\n\nAccuracy in %, BLEU as is: mean (σ) over seeds; Epoch: mean best epoch (1-based).\n\n"
        + table(lambda c: format_mean_std(c["mean"], c["std"]), " (σ)", epoch=True)
        + "\nBeyond the paper: difference to Xavier of the same block, paired by seed: "
        "mean [bootstrap 95% CI], paired t-test p.\n\n"
        + table(lambda c: paired_cell(c, c.diff_vs_xavier), " Δ", epoch=False)
        + "\n"
        + _sources_note(summary)
    )


def paired_cell(c, diff: float) -> str:
    """'+1.2 [-0.3, +2.8] p=0.041': the paired difference, its bootstrap CI and t-test p; '-' without pairs."""
    if pd.isna(diff):
        return "-"
    ci = "" if pd.isna(c.ci_low) else f" [{c.ci_low:+.1f}, {c.ci_high:+.1f}]"
    p = "" if pd.isna(c.p_paired_t) else f" p={c.p_paired_t:.3f}" if c.p_paired_t >= 0.001 else " p<0.001"
    return f"{diff:+.1f}{ci}{p}"


def _table1_summary(runs, config, initializers, variant, n_boot, boot_seed) -> pd.DataFrame:
    long = _long(runs, _table1_metrics, lambda r: r["variant"] == variant)
    summary = summarize(long, config, n_boot, boot_seed)
    return summary[summary.initializer.isin(initializers)].reset_index(drop=True)


def table1(
    runs, config: dict, csv_path, md_path, variant: str = "base", n_boot: int = 10_000, boot_seed: int = 0
) -> pd.DataFrame:
    """Table 1: every configured initializer except Xavier_Pretrained (that is Table 7)."""
    inits = [i for i in config["initializers"] if i != "Xavier_Pretrained"]
    summary = _table1_summary(runs, config, inits, variant, n_boot, boot_seed)
    write_csv_md(csv_path, md_path, summary, _layout(summary, config, "Table 1"))
    return summary


def table7(
    runs, config: dict, csv_path, md_path, variant: str = "base", n_boot: int = 10_000, boot_seed: int = 0
) -> pd.DataFrame:
    """Table 7: the Xavier_Pretrained rows (appendix A.3) in Table 1's layout."""
    summary = _table1_summary(runs, config, ["Xavier_Pretrained"], variant, n_boot, boot_seed)
    write_csv_md(csv_path, md_path, summary, _layout(summary, config, "Table 7"))
    return summary


def table3(runs, config: dict, csv_path, md_path, n_boot: int = 10_000, boot_seed: int = 0) -> pd.DataFrame:
    """Table 3: config `table3` initializers x variants (embedding trainable x position encoding)."""
    spec = config["table3"]
    long = _long(
        runs,
        _table3_metrics,
        lambda r: r["block"] == spec["block"]
        and r["initializer"] in spec["initializers"]
        and r["variant"] in spec["variants"],
    )
    summary = summarize(long, config, n_boot, boot_seed)
    switches = summary.variant.map(config["variants"])
    summary.insert(4, "embedding_trainable", switches.map(lambda s: bool(s["embedding_trainable"])))
    summary.insert(5, "pos_encoding", switches.map(lambda s: s["pos_encoding"] != "none"))

    cell = summary.set_index(["initializer", "variant", "metric"])
    rows = []
    for init in ordered(summary.initializer, spec["initializers"]):
        for variant in ordered(summary.variant, spec["variants"]):
            if (init, variant, "bleu") not in cell.index:
                continue
            loss, bleu = cell.loc[(init, variant, "best_valid_loss")], cell.loc[(init, variant, "bleu")]
            rows.append(
                [
                    loss.label,
                    "yes" if loss.embedding_trainable else "no",
                    "yes" if loss.pos_encoding else "no",
                    f"{loss['mean']:.2f} ({loss.mean_best_epoch:.1f})",
                    format_mean_std(bleu["mean"], bleu["std"]),
                ]
            )
    header = ["Embedding", "Emb. trainable", "Pos. enc.", "Lowest val loss (epoch)", "Test BLEU (σ)"]
    md = (
        f"# Table 3 ({spec['block']})\n\nMean over seeds; epoch = mean best epoch (1-based).\n\n"
        + markdown_table(header, rows)
        + "\n"
        + _sources_note(summary)
    )
    write_csv_md(csv_path, md_path, summary, md)
    return summary


def _crossed(runs, config: dict, spec: dict, versus: tuple[str, str], n_boot: int, boot_seed: int) -> pd.DataFrame:
    """Table 1's summary of `spec`'s blocks x initializers x variants, compared with `versus`."""
    long = _long(
        runs,
        _table1_metrics,
        lambda r: r["block"] in spec["blocks"]
        and r["initializer"] in spec["initializers"]
        and r["variant"] in spec["variants"],
    )
    return summarize(long, config, n_boot, boot_seed, versus)


def _crossed_layout(summary: pd.DataFrame, spec: dict, title: str, setting: str, shown, diff: str, why: str) -> str:
    """A row per variant x initializer (variant shown as `shown(variant)` under the header `setting`); per block
    its main metric (mean (σ)) and the paired difference `diff` (the summary's column)."""
    blocks = ordered(summary.block, spec["blocks"])
    main = {b: "bleu" if "bleu" in set(summary.metric[summary.block == b]) else "accuracy_pct" for b in blocks}
    cell = summary.set_index(["block", "variant", "initializer", "metric"])
    header = [setting, "Embedding"]
    for b in blocks:
        name = f"{TASK_DISPLAY.get(summary.task[summary.block == b].iloc[0], b)} {METRIC_DISPLAY[main[b]]}"
        header += [f"{name} (σ)", f"{name} Δ"]
    rows = []
    for variant in ordered(summary.variant, spec["variants"]):
        for init in ordered(summary.initializer, spec["initializers"]):
            row = [shown(variant), summary.label[summary.initializer == init].iloc[0]]
            for b in blocks:
                key = (b, variant, init, main[b])
                c = cell.loc[key] if key in cell.index else None
                row += ["-", "-"] if c is None else [format_mean_std(c["mean"], c["std"]), paired_cell(c, c[diff])]
            rows.append(row)
    return (
        f"# {title}\n\n{why}\n\nAccuracy in %, BLEU as is (paper BLEU): mean (σ) over seeds. Δ: the paired "
        "difference (by seed) with its bootstrap 95% CI and paired t-test p.\n\n"
        + markdown_table(header, rows)
        + "\n"
        + _sources_note(summary)
    )


def table9(runs, config: dict, csv_path, md_path, n_boot: int = 10_000, boot_seed: int = 0) -> pd.DataFrame:
    """Table 9 (beyond the paper): initializers x position encodings (config `table9`), each compared with Xavier
    under the same position encoding. Does a pre-trained layer still lose once the position encoding no longer
    adds to the embedding (rotary, relative: they act on attention)?"""
    spec = config["table9"]
    summary = _crossed(runs, config, spec, ("initializer", "Xavier"), n_boot, boot_seed)
    summary.insert(4, "pos_encoding", summary.variant.map(lambda v: config["variants"][v]["pos_encoding"]))
    md = _crossed_layout(
        summary,
        spec,
        "Table 9 (beyond the paper): position encodings",
        "Position encoding",
        lambda v: config["variants"][v]["pos_encoding"],
        "diff_vs_xavier",
        "Δ against Xavier with the same position encoding. sinusoidal and learned add P to the scaled embedding; "
        "rotary (queries and keys rotated) and relative (a learned bias on the attention scores) leave it alone; "
        "none has no position information.",
    )
    write_csv_md(csv_path, md_path, summary, md)
    return summary


def table11(runs, config: dict, csv_path, md_path, n_boot: int = 10_000, boot_seed: int = 0) -> pd.DataFrame:
    """Table 11 (beyond the paper): the translator's output embedding untied (the paper's), tied to the decoder's
    input embedding, or its own matrix initialized from the same layer (config `table11`), each compared with
    the untied model (variant `base`) of the same initializer and seed."""
    spec = config["table11"]
    summary = _crossed(runs, config, spec, ("variant", "base"), n_boot, boot_seed)
    coupling = summary.variant.map(lambda v: config["variants"][v].get("output_embedding", "untied"))
    summary.insert(4, "output_embedding", coupling)
    md = _crossed_layout(
        summary,
        spec,
        "Table 11 (beyond the paper): output-embedding coupling",
        "Output embedding",
        lambda v: config["variants"][v].get("output_embedding", "untied"),
        "diff_vs_base",
        "Δ against the untied model (variant base) of the same initializer and seed.",
    )
    write_csv_md(csv_path, md_path, summary, md)
    return summary


def _single(block: str, name: str, values: pd.Series):
    """A setting every run of a block must share; differing values mean runs of different configs."""
    unique = values.dropna().unique()
    if len(unique) > 1:
        raise ValueError(f"block {block}: runs disagree on {name}: {sorted(unique)}")
    return unique[0] if len(unique) else np.nan


def table5(runs, config: dict, csv_path, md_path, variant: str = "base") -> pd.DataFrame:
    """Table 5: per block the settings and sizes the runs report; minutes per epoch averaged over runs."""
    keys = ["params", "epochs", "batch_size", "train_size", "train_minutes_per_epoch"]
    rows = []
    for path, run in runs:
        if field(path, run, "variant") != variant:
            continue
        vocab = field(path, run, "vocab_sizes")
        rows.append(
            {
                "block": field(path, run, "block"),
                "task": field(path, run, "task"),
                **{k: field(path, run, k) for k in keys},
                "vocab_encoder": vocab["encoder"],
                "vocab_decoder": vocab.get("decoder"),
            }
        )
    if not rows:
        raise ValueError(f"Table 5: no {variant} runs among the inputs")
    runs_frame = pd.DataFrame(rows)
    table = []
    for block in ordered(runs_frame.block, list(config["blocks"])):
        part = runs_frame[runs_frame.block == block]
        sources, display = block_sources(config, block)
        row = {
            "block": block,
            "task": part.task.iloc[0],
            "family": config["blocks"][block]["family"],
            "sources": sources,
            "source_display": display,
        }
        for name in ["params", "epochs", "batch_size", "vocab_encoder", "vocab_decoder", "train_size"]:
            row[name] = _single(block, name, part[name])
        row.update(
            train_minutes_per_epoch=part.train_minutes_per_epoch.mean(),
            train_minutes_per_epoch_std=part.train_minutes_per_epoch.std(ddof=1),
            n_runs=len(part),
        )
        table.append(row)
    table = pd.DataFrame(table)

    def vocab(r) -> str:
        return f"{r.vocab_encoder:,.0f}" + ("" if pd.isna(r.vocab_decoder) else f" / {r.vocab_decoder:,.0f}")

    rows_md = [
        [
            r.block,
            r.source_display,
            f"{r.params / 1e6:.1f}M",
            str(int(r.epochs)),
            str(int(r.batch_size)),
            vocab(r),
            f"{r.train_size:,.0f}",
            f"{r.train_minutes_per_epoch:.2f}",
        ]
        for r in table.itertuples()
    ]
    header = [
        "Block",
        "Sources",
        "Params",
        "Epochs",
        "Batch size",
        "Vocab (enc / dec)",
        "Train size",
        "Minutes / epoch",
    ]
    md = (
        "# Table 5\n\nFrom the runs' own final.json; minutes per epoch: training time only (validation "
        "excluded, as in the paper), mean over runs (hardware-dependent).\n\n" + markdown_table(header, rows_md)
    )
    write_csv_md(csv_path, md_path, table, md)
    return table
