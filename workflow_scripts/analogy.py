"""Snakemake `script:` for Table 4, its sensitivity table (rule table4 / table4_sensitivity) and Table 10 (rule
table10), embinit.reports.analogy (3CosAdd itself: embinit.layers.analogy).

Expects, rules table4 and table4_sensitivity:
  snakemake.input.vectors    results/<block>/pretrained_<side>.npy  (block, side = config table4.block/.side)
  snakemake.input.tokens     results/<block>/pretrained_<side>.parquet  (column `token`, row order = vectors)
  snakemake.input.questions  data/raw/word2vec/questions-words.txt  (config table4.questions)
  snakemake.params.config    the config sections reports read; this uses table4 (block, side, seed, pos_enc,
                             pos_rows, sensitivity_rows), model (pos_base), blocks, sources
Rule table10:
  snakemake.params.runs      the run sheet's rows of Table 10 (embinit.runsheet), each naming its final.json
                             (final), embeddings.npz (trained) and starting layer (initial), which are the inputs
  snakemake.input.tokens     results/<block>/pretrained_<side>.parquet  (block, side = config table10.block/.side)
  snakemake.input.questions  data/raw/word2vec/questions-words.txt
  snakemake.params.config    as above, with table10 (side) and table4 (seed, pos_rows: P)
Both:
  snakemake.output           named `csv` and `md`
  snakemake.log[0]           the job's log
"""

import logging

import pandas as pd

from embinit.io import job_log
from embinit.reports.analogy import table4, table4_sensitivity, table10

with job_log(snakemake.log[0]):
    inp, out, config = snakemake.input, snakemake.output, snakemake.params.config
    if snakemake.rule == "table10":
        runs = pd.DataFrame(snakemake.params.runs)
        table = table10(runs, inp.tokens, inp.questions, config, out.csv, out.md)
    else:
        write = {"table4": table4, "table4_sensitivity": table4_sensitivity}[snakemake.rule]
        table = write(inp.vectors, inp.tokens, inp.questions, config, out.csv, out.md)
    logging.info("%s: %d rows -> %s, %s", snakemake.rule, len(table), out.csv, out.md)
