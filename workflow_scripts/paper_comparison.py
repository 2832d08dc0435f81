"""Snakemake `script:` for rule paper_comparison (embinit.reports.comparison).

Expects:
  snakemake.input.paper_tables  the paper's tables as Markdown (config paper_comparison.paper_tables)
  snakemake.input.tables        our table<N>.csv, all in params.results_dir (the comparison reads them from there)
  snakemake.params.results_dir  the results directory
  snakemake.output              named `csv` and `md`
"""

from embinit.reports.comparison import paper_comparison

paper_comparison(
    snakemake.params.results_dir,
    snakemake.input.paper_tables,  # noqa: F821
    snakemake.output.csv,
    snakemake.output.md,
)  # noqa: F821
