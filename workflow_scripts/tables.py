"""Snakemake `script:` for the paper's Tables 1, 3, 5, 7 and (beyond the paper) 9, 11 (embinit.reports.tables),
Figure 1 and Figure 2 (embinit.reports.figures).

Expects:
  snakemake.params.table   "1", "3", "5", "7", "9", "11", "figure1" or "figure2"
  snakemake.params.config  the config sections reports read (blocks, sources, initializers, variants, tasks, model,
                           and the table's or figure's own section: table3, table9, table11, figure1, figure2)
  snakemake.input          tables: the final.json paths, results/<block>/<init>/seed<k>/<variant>/final.json (all
                           inputs); figure1, figure2: named `runs` (final.json paths) and `metrics` (their
                           metrics.parquet, in the same order)
  snakemake.output         tables: named `csv` and `md`; figure1, figure2: named `png` and `csv`
  snakemake.log[0]         the job's log
"""

import logging

from embinit.io import job_log
from embinit.reports import figures, tables

TABLES = {
    "1": tables.table1,
    "3": tables.table3,
    "5": tables.table5,
    "7": tables.table7,
    "9": tables.table9,
    "11": tables.table11,
}
FIGURES = {"figure1": ("Figure 1", figures.figure1), "figure2": ("Figure 2", figures.figure2)}

with job_log(snakemake.log[0]):
    table, out, config = str(snakemake.params.table), snakemake.output, snakemake.params.config
    if table in FIGURES:
        name, draw = FIGURES[table]
        runs = tables.load_runs(snakemake.input.runs)
        result = draw(runs, snakemake.input.metrics, config, out.png, out.csv)
        logging.info("%s: %d runs, %d curve points -> %s, %s", name, len(runs), len(result), out.png, out.csv)
    else:
        runs = tables.load_runs(snakemake.input)
        result = TABLES[table](runs, config, out.csv, out.md)
        logging.info("Table %s: %d runs, %d rows -> %s, %s", table, len(runs), len(result), out.csv, out.md)
