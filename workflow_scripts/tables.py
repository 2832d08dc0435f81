"""Snakemake `script:` for the paper's Tables 1, 3, 5, 7 (embinit.reports.tables) and Figure 1 (embinit.reports.figures).

Expects:
  snakemake.params.table   "1", "3", "5", "7" or "figure1"
  snakemake.params.config  the config sections reports read (blocks, sources, initializers, variants, tasks, model,
                           table3, table4, figure1)
  snakemake.input          tables: the final.json paths, results/<block>/<init>/seed<k>/<variant>/final.json (all
                           inputs); figure1: named `runs` (final.json paths) and `metrics` (their metrics.parquet,
                           in the same order)
  snakemake.output         tables: named `csv` and `md`; figure1: named `png` and `csv`
  snakemake.log[0]         the job's log
"""

import logging

from embinit.io import job_log
from embinit.reports import figures, tables

TABLES = {"1": tables.table1, "3": tables.table3, "5": tables.table5, "7": tables.table7}

with job_log(snakemake.log[0]):
    table, out, config = str(snakemake.params.table), snakemake.output, snakemake.params.config
    if table == "figure1":
        runs = tables.load_runs(snakemake.input.runs)
        result = figures.figure1(runs, snakemake.input.metrics, config, out.png, out.csv)
        logging.info("Figure 1: %d runs, %d curve points -> %s, %s", len(runs), len(result), out.png, out.csv)
    else:
        runs = tables.load_runs(snakemake.input)
        result = TABLES[table](runs, config, out.csv, out.md)
        logging.info("Table %s: %d runs, %d rows -> %s, %s", table, len(runs), len(result), out.csv, out.md)
