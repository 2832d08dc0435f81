"""Snakemake `script:` for rule paper_comparison (embinit.reports.comparison).

Expects:
  snakemake.input.paper_tables  the paper's tables as Markdown (config paper_comparison.paper_tables)
  snakemake.input.tables        our table<N>.csv files (the number is read from the name; other names are ignored)
  snakemake.output              named `csv` and `md`
  snakemake.log[0]              the job's log
"""

import logging

from embinit.io import job_log
from embinit.reports.comparison import paper_comparison

with job_log(snakemake.log[0]):
    inp, out = snakemake.input, snakemake.output
    table = paper_comparison(list(inp.tables), inp.paper_tables, out.csv, out.md)
    logging.info("paper comparison: %d cells -> %s, %s", len(table), out.csv, out.md)
