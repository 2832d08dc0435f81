"""Snakemake `script:` for Table 4, word analogy on a block's pre-trained layer (embinit.analogy).

Expects:
  snakemake.input.vectors    results/<block>/pretrained_<side>.npy  (block, side = config table4.block/.side)
  snakemake.input.tokens     results/<block>/pretrained_<side>.parquet  (column `token`, row order = vectors)
  snakemake.input.questions  data/raw/word2vec/questions-words.txt  (config table4.questions)
  snakemake.output           named `csv` and `md`
  snakemake.config           table4 (block, side, seed), model (max_len, pos_base), blocks, sources
"""
from embinit.analogy import table4

inp = snakemake.input  # noqa: F821
table4(inp.vectors, inp.tokens, inp.questions, snakemake.config,  # noqa: F821
       snakemake.output.csv, snakemake.output.md)  # noqa: F821
