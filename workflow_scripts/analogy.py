"""Snakemake `script:` for Table 4 and its sensitivity table (rule table4 / table4_sensitivity), embinit.reports.analogy.

Expects:
  snakemake.input.vectors    results/<block>/pretrained_<side>.npy  (block, side = config table4.block/.side)
  snakemake.input.tokens     results/<block>/pretrained_<side>.parquet  (column `token`, row order = vectors)
  snakemake.input.questions  data/raw/word2vec/questions-words.txt  (config table4.questions)
  snakemake.params.config    the config sections reports read; this uses table4 (block, side, seed, pos_enc,
                             pos_rows, sensitivity_rows), model (pos_base), blocks, sources
  snakemake.output           named `csv` and `md`
  snakemake.log[0]           the job's log
"""

import logging

from embinit.io import job_log
from embinit.reports.analogy import table4, table4_sensitivity

with job_log(snakemake.log[0]):
    write = {"table4": table4, "table4_sensitivity": table4_sensitivity}[snakemake.rule]
    inp, out = snakemake.input, snakemake.output
    table = write(inp.vectors, inp.tokens, inp.questions, snakemake.params.config, out.csv, out.md)
    logging.info("%s: %d rows -> %s, %s", snakemake.rule, len(table), out.csv, out.md)
