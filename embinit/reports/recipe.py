"""The recipe ablation (beyond the paper's tables): Table 3's cells under this project's first model and the paper's
recipe (nn.Transformer's parametrization, random batches), one change at a time: valid-loss curves and the test BLEU
each reaches, each variant against its cell's first-model runs paired by seed."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from embinit.io import atomic_path
from embinit.reports.figures import band, epoch_panel
from embinit.reports.format import format_mean_std, markdown_table, write_csv_md
from embinit.reports.tables import field, paired_cell, paired_difference, read_final, t_interval

EPOCHS_SHOWN = (1, 2, 5, 10, 20, 30)  # valid loss at these epochs, those some run reached
CELL = ["pos_encoding", "embedding_trainable"]  # Table 3's cell: what a variant is, apart from the recipe's switches


def _model(run) -> str:
    """'recipe' or 'first', and its stacks' final LayerNorms where they differ from that model's own."""
    name = "recipe" if run.model_init == "recipe" else "first"
    return name if bool(run.final_norm) == (run.model_init == "recipe") else f"{name}, final LN {run.final_norm}"


def _cell(variant) -> tuple:
    """The Table 3 cell a variant's run-sheet row fills."""
    return tuple(variant[c] for c in CELL)


def _per_run(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per run (its final record's scores) and one per run and epoch (its valid loss)."""
    rows, curves = [], []
    for run in runs.itertuples():
        record = read_final(run.final)
        rows.append(
            {
                "variant": run.variant,
                "seed": run.seed,
                "bleu": field(run.final, record, "test_paper_bleu"),
                "best_valid_loss": field(run.final, record, "best_valid_loss"),
                "best_epoch": field(run.final, record, "best_epoch"),
            }
        )
        metrics = pd.read_parquet(run.metrics, columns=["epoch", "valid_loss"])
        curves.append(metrics.assign(variant=run.variant, seed=run.seed))
    return pd.DataFrame(rows), pd.concat(curves, ignore_index=True)


def recipe_ablation(runs: pd.DataFrame, csv_path, md_path, png_path) -> pd.DataFrame:
    """A row per variant, in the selection's order: its switches, valid loss at EPOCHS_SHOWN, the lowest valid loss
    and its epoch, test BLEU (paper's) with its 95% interval, and the paired difference to the first model's runs of
    the same cell (the variant whose model and batches are both the first's); a panel of curves per cell."""
    scores, curves = _per_run(runs)
    shown = [e for e in EPOCHS_SHOWN if e <= curves.epoch.max()]
    variants = runs.drop_duplicates("variant").set_index("variant")
    first = {_cell(v): name for name, v in variants.iterrows() if v.model_init == "legacy" and v.batching == "bucketed"}
    rows = []
    for name, v in variants.iterrows():
        mine = scores[scores.variant == name].set_index("seed")
        row = {
            "variant": name,
            **{c: v[c] for c in CELL},
            "model": _model(v),
            "batching": v.batching,
            "n_seeds": len(mine),
        }
        loss = curves[curves.variant == name].groupby("epoch").valid_loss.mean()
        row.update({f"valid_loss_epoch{e}": loss.get(e) for e in shown})
        row.update(
            best_valid_loss=mine.best_valid_loss.mean(),
            mean_best_epoch=mine.best_epoch.mean(),
            bleu=mine.bleu.mean(),
            bleu_std=mine.bleu.std(),
        )
        row["ci_low"], row["ci_high"] = t_interval(row["bleu"], row["bleu_std"], len(mine))
        reference = first.get(_cell(v))
        reference = None if reference == name else reference  # the first model's own row has nothing to pair with
        versus = scores[scores.variant == reference].set_index("seed").bleu
        diff = paired_difference(mine.bleu.sub(versus).dropna())
        row.update(versus_variant=reference, diff_vs_first=diff.pop("diff"))
        row.update({f"diff_{k}": value for k, value in diff.items()})
        rows.append(row)
    summary = pd.DataFrame(rows)
    write_csv_md(csv_path, md_path, summary, _markdown(summary, runs, shown))
    _figure(curves, variants, png_path)
    return summary


def _markdown(summary: pd.DataFrame, runs: pd.DataFrame, shown: list[int]) -> str:
    header = ["Variant", "Emb. trainable", "Pos. enc.", "Model", "Batches", "Seeds"]
    header += [f"Valid loss, epoch {e}" for e in shown]
    header += ["Lowest valid loss (epoch)", "Test BLEU (σ)", "95% interval", "Δ BLEU vs first model [95%]"]
    rows = []
    for r in summary.itertuples():
        interval = "-" if pd.isna(r.ci_low) else f"[{r.ci_low:.1f}, {r.ci_high:.1f}]"
        diff = pd.Series({k.removeprefix("diff_"): getattr(r, k) for k in summary.columns if k.startswith("diff_")})
        rows.append(
            [
                r.variant,
                "yes" if r.embedding_trainable else "no",
                "no" if r.pos_encoding == "none" else r.pos_encoding,
                r.model,
                r.batching,
                str(r.n_seeds),
                *(
                    "-" if pd.isna(getattr(r, f"valid_loss_epoch{e}")) else f"{getattr(r, f'valid_loss_epoch{e}'):.2f}"
                    for e in shown
                ),
                f"{r.best_valid_loss:.2f} ({r.mean_best_epoch:.1f})",
                format_mean_std(r.bleu, r.bleu_std),
                interval,
                paired_cell(diff, r.diff_vs_first) if r.versus_variant else "-",
            ]
        )
    block = runs.block.iloc[0]
    return (
        f"# Recipe ablation ({block})\n\n"
        "Mean over seeds; valid loss is the token mean over the validation split; test BLEU is the paper's (the\n"
        "lowest-valid-loss epoch). Model: recipe = nn.Transformer as the PyTorch translation recipe initializes it\n"
        "(Q, K, V thirds of one packed Xavier draw, torch's bias defaults, a final LayerNorm after each stack); first =\n"
        "this project's first model (separate Q, K, V draws, zero biases, no final LayerNorms). Batches: random = the\n"
        "recipe's shuffled batches; bucketed = length buckets. Δ: paired by seed against the same cell's first model on\n"
        "length buckets.\n\n" + markdown_table(header, rows)
    )


def _figure(curves: pd.DataFrame, variants: pd.DataFrame, png_path) -> None:
    """Valid loss per epoch, mean and one sigma over seeds: a panel per Table 3 cell, a line per variant."""
    cells = list(dict.fromkeys(_cell(v) for _, v in variants.iterrows()))
    fig = Figure(figsize=(5 * len(cells), 4), layout="constrained")
    for ax, cell in zip(fig.subplots(1, len(cells), squeeze=False)[0], cells):
        for name, v in variants.iterrows():
            if _cell(v) != cell:
                continue
            line = curves[curves.variant == name].groupby("epoch").valid_loss.agg(["mean", "std", "count"])
            label = f"{name}: {_model(v)}, {v.batching} ({int(line['count'].max())} seed(s))"
            band(ax, line.reset_index(), "mean", "std", label)
        pos, trainable = cell
        ax.set_title(
            f"embedding {'trainable' if trainable else 'frozen'}, {'no P' if pos == 'none' else pos + ' P'}", fontsize=9
        )
        epoch_panel(ax, "Validation loss (mean ± σ over seeds)", 7)
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=150)
