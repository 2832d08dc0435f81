"""One builder per output of embinit/workflow/outputs.py, named as the output: it writes the output's files from its Snakemake
job (workflow_scripts/report.py) and returns its rows. `job.params.rows` are the run-sheet rows of the runs it shows,
`job.params.layers` the layer-sheet rows of the files it reads, `job.params.config` the config sections it reads."""

from __future__ import annotations

import pandas as pd

from embinit.workflow.config import scaled_initializers
from embinit.reports import analogy, comparison, field, figures, recipe, statistics, sweeps, tables
from embinit.reports.export import export_layers
from embinit.reports.matches import write_match_report
from embinit.reports.runs import run_table, write_runs
from embinit.reports.tensorboard import write_tensorboard


def _rows(job) -> pd.DataFrame:
    return pd.DataFrame(job.params.rows)


def _layers(job) -> pd.DataFrame:
    return pd.DataFrame(job.params.layers)


def _file(layers: pd.DataFrame, file: str) -> str:
    return layers.path[layers.file == file].iloc[0]


def table1(job) -> pd.DataFrame:
    return tables.result_table(_rows(job), job.output.csv, job.output.md, "Table 1")


def table2(job) -> pd.DataFrame:
    layers = _layers(job)[["block", "task", "family", "source", "side", "initializer", "path"]]
    return statistics.write_stats_table(layers.to_dict("records"), job.output.csv, job.output.md)


def table3(job) -> pd.DataFrame:
    return tables.table3(_rows(job), job.output.csv, job.output.md)


def table4(job) -> pd.DataFrame:
    return _analogies(job, analogy.table4)


def table4_sensitivity(job) -> pd.DataFrame:
    return _analogies(job, analogy.table4_sensitivity)


def _analogies(job, build) -> pd.DataFrame:
    """Table 4 or its sensitivity, from the pre-trained vectors and their tokens: one reading of the job for both."""
    layers, out = _layers(job), job.output
    vectors, tokens = _file(layers, "pretrained"), _file(layers, "tokens")
    return build(vectors, tokens, job.input.questions, job.params.config, out.csv, out.md)


def table5(job) -> pd.DataFrame:
    return tables.table5(_rows(job), job.output.csv, job.output.md)


def table6(job) -> pd.DataFrame:
    layers, config = _layers(job), job.params.config
    by_initializer = dict(zip(layers.initializer, layers.path))
    family, source, out = layers.family[0], layers.source_display[0], job.output
    pos_rows, pos_base = config["table6"]["pos_rows"], config["model"]["pos_base"]
    return statistics.write_table6(by_initializer, family, source, pos_rows, pos_base, out.csv, out.md)


def table7(job) -> pd.DataFrame:
    return tables.result_table(_rows(job), job.output.csv, job.output.md, "Table 7", [tables.XAVIER.value])


def table8(job) -> pd.DataFrame:
    return table2(job)  # Table 2's statistics, of the Xavier_Pretrained layers


def figure1(job) -> pd.DataFrame:
    return figures.figure1(_rows(job), job.output.png, job.output.csv)


def table9(job) -> pd.DataFrame:
    return tables.crossed_table(_rows(job), "table9", job.output.csv, job.output.md)


def table10(job) -> pd.DataFrame:
    layers = _layers(job)
    initial = layers[layers.file == "layer"][["block", "initializer", "seed", "path"]]
    runs = _rows(job).merge(initial.rename(columns={"path": "initial"}), on=["block", "initializer", "seed"])
    tokens, out = _file(layers, "tokens"), job.output
    return analogy.table10(runs, tokens, job.input.questions, job.params.config, out.csv, out.md)


def table11(job) -> pd.DataFrame:
    return tables.crossed_table(_rows(job), "table11", job.output.csv, job.output.md)


def figure2(job) -> pd.DataFrame:
    return figures.figure2(_rows(job), job.output.png, job.output.csv)


def table12(job) -> pd.DataFrame:
    section, runs, out = job.params.config["table12"], _rows(job), job.output
    doses = scaled_initializers(section)
    runs = runs.assign(**{key: [doses[i][key] for i in runs.initializer] for key in ("base", "k")})
    return sweeps.table12(runs, section["bases"], out.csv, out.md, out.png)


def table13(job) -> pd.DataFrame:
    return sweeps.table13(_rows(job), job.output.csv, job.output.md, job.output.png)


def table14(job) -> pd.DataFrame:
    config, out = job.params.config, job.output
    return field.table14(
        _rows(job), _layers(job), config["table14"], config["model"]["pos_base"], out.csv, out.md, out.png
    )


def recipe_ablation(job) -> pd.DataFrame:
    out = job.output
    return recipe.recipe_ablation(_rows(job), out.csv, out.md, out.png)


def paper_comparison(job) -> pd.DataFrame:
    inp, out = job.input, job.output
    return comparison.paper_comparison(
        list(inp.tables), _rows(job), inp.paper_tables, out.csv, out.md, job.params.seeded
    )


def findings(job) -> pd.DataFrame:
    inp, out = job.input, job.output
    return comparison.findings(list(inp.tables), _rows(job), inp.paper_tables, out.csv, out.md, job.params.seeded)


def embedding_matches(job) -> pd.DataFrame:
    return write_match_report(_layers(job).to_dict("records"), job.output.csv)


def runs(job) -> pd.DataFrame:
    table, out = run_table(_rows(job)), job.output
    write_runs(table, out.csv, out.parquet, out.html, f"Runs of {job.config['results_dir']}")
    return table


def tensorboard(job) -> pd.DataFrame:
    rows = _rows(job)
    return write_tensorboard(run_table(rows), rows.metrics.tolist(), job.output.folder)


def layer_export(job) -> pd.DataFrame:
    return export_layers(_layers(job), job.output.folder)
