"""Snakemake `script:` for Table 4 and its sensitivity table (rule table4 / table4_sensitivity), embinit.reports.analogy.

Expects:
  snakemake.input.vectors    results/<block>/pretrained_<side>.npy  (block, side = config table4.block/.side)
  snakemake.input.tokens     results/<block>/pretrained_<side>.parquet  (column `token`, row order = vectors)
  snakemake.input.questions  data/raw/word2vec/questions-words.txt  (config table4.questions)
  snakemake.output           named `csv` and `md`
  snakemake.config           table4 (block, side, seed, pos_enc, pos_rows, sensitivity_rows), model (pos_base),
                             blocks, sources
"""

from embinit.reports.analogy import table4, table4_sensitivity

write = {"table4": table4, "table4_sensitivity": table4_sensitivity}[snakemake.rule]  # noqa: F821
inp = snakemake.input  # noqa: F821
write(
    inp.vectors,
    inp.tokens,
    inp.questions,
    snakemake.config,  # noqa: F821
    snakemake.output.csv,
    snakemake.output.md,
)  # noqa: F821
