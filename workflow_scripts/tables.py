"""Snakemake `script:` for the paper's Tables 1, 3, 5, 7 and Figure 1 (embinit.reports.tables).

Expects:
  snakemake.input         final.json paths, results/<block>/<init>/seed<k>/<variant>/final.json (other inputs,
                          e.g. the metrics.parquet beside each that Figure 1 reads, may be listed and are ignored)
  snakemake.params.table  "1", "3", "5", "7" or "figure1"
  snakemake.output        tables: named `csv` and `md`; figure1: named `png` and `csv`
  snakemake.config        the pipeline config (blocks, sources, initializers, variants, table3, figure1)
"""

from embinit.reports import tables

TABLES = {"1": tables.table1, "3": tables.table3, "5": tables.table5, "7": tables.table7}

runs = tables.load_runs([p for p in snakemake.input if str(p).endswith("final.json")])  # noqa: F821
table, out, config = str(snakemake.params.table), snakemake.output, snakemake.config  # noqa: F821
if table == "figure1":
    tables.figure1(runs, config, out.png, out.csv)
else:
    TABLES[table](runs, config, out.csv, out.md)
