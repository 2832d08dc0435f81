"""Snakemake `script:` for the tables and figures built from training runs: the paper's Tables 1, 3, 5, 7 and
(beyond the paper) 9, 11 (embinit.reports.tables), Figure 1 and Figure 2 (embinit.reports.figures).

Expects:
  snakemake.params.table   "table1", "table3", "table5", "table7", "table9", "table11", "figure1" or "figure2"
  snakemake.params.runs    the run sheet's rows of that output (embinit.runsheet), each naming its files
                           (final: final.json, metrics: metrics.parquet); the rule's inputs are those files
  snakemake.output         tables: named `csv` and `md`; figures: named `png` and `csv`
  snakemake.log[0]         the job's log
"""

import logging

import pandas as pd

from embinit.io import job_log
from embinit.reports import figures, tables

BUILD = {
    "table1": lambda runs, out: tables.result_table(runs, out.csv, out.md, "Table 1"),
    "table7": lambda runs, out: tables.result_table(runs, out.csv, out.md, "Table 7", references=["Xavier"]),
    "table3": lambda runs, out: tables.table3(runs, out.csv, out.md),
    "table5": lambda runs, out: tables.table5(runs, out.csv, out.md),
    "table9": lambda runs, out: tables.crossed_table(runs, "table9", out.csv, out.md),
    "table11": lambda runs, out: tables.crossed_table(runs, "table11", out.csv, out.md),
    "figure1": lambda runs, out: figures.figure1(runs, out.png, out.csv),
    "figure2": lambda runs, out: figures.figure2(runs, out.png, out.csv),
}

with job_log(snakemake.log[0]):
    name, runs = snakemake.params.table, pd.DataFrame(snakemake.params.runs)
    result = BUILD[name](runs, snakemake.output)
    logging.info("%s: %d runs, %d rows -> %s", name, len(runs), len(result), ", ".join(snakemake.output))
