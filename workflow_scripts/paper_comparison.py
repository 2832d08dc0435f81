"""Snakemake `script:` for rule paper_comparison (embinit.reports.comparison).

Expects:
  snakemake.input.paper_tables  the paper's numbers as tidy CSV (config paper_comparison.paper_tables)
  snakemake.input.tables        our table<N>.csv files (the number is read from the name; other names are ignored)
  snakemake.params.runs         the run sheet's rows of Tables 1, 3 and 7 among them (column `output`), whose
                                final.json files (input.runs) give the per-seed values the findings are judged on
  snakemake.output              named `csv` and `md`
  snakemake.log[0]              the job's log
"""

import logging

import pandas as pd

from embinit.io import job_log
from embinit.reports.comparison import paper_comparison

with job_log(snakemake.log[0]):
    inp, out = snakemake.input, snakemake.output
    runs = pd.DataFrame(snakemake.params.runs)
    checks = paper_comparison(list(inp.tables), runs, inp.paper_tables, out.csv, out.md)
    logging.info("paper comparison: %s -> %s, %s", checks.verdict.value_counts().to_dict(), out.csv, out.md)
