"""Snakemake `script:` for a statistics table (embinit.reports.statistics), chosen by params.table.

Expects:
  snakemake.params.table    2, 6 or 8
  Tables 2 and 8:
    snakemake.input         the layers' .npy files (the paths of params.entries)
    snakemake.params.entries  list of dicts (block, task, family, source, side, initializer, path: one of the inputs)
  Table 6:
    snakemake.input         named by initializer (input.Xavier, input.Pretrained, input.Pretrained_Xavier; row order)
    snakemake.params.src    the source's display name (e.g. "GloVe-6B-50d (stand-in for GloVe 840B)")
    snakemake.params.pos_rows, snakemake.params.pos_base   rows and base of the position-encoding table
    snakemake.params.family   the block's family (e.g. "GloVe"), which labels the rows
  snakemake.output          named `csv` and `md`
  snakemake.log[0]          the job's log
"""

import logging

from embinit.io import job_log
from embinit.reports.statistics import write_stats_table, write_table6

with job_log(snakemake.log[0]):
    p, out = snakemake.params, snakemake.output
    if int(p.table) == 6:
        table = write_table6(dict(snakemake.input.items()), p.family, p.src, p.pos_rows, p.pos_base, out.csv, out.md)
    else:
        table = write_stats_table(p.entries, out.csv, out.md)
    logging.info("Table %s: %d rows -> %s, %s", p.table, len(table), out.csv, out.md)
