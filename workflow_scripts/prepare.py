"""Snakemake script: one task's raw files -> Parquet splits (embinit.data.prepare)."""

import logging

from embinit.data.prepare import prepare

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
sizes = prepare(snakemake.params.fmt, dict(snakemake.input.items()), dict(snakemake.output.items()))
logging.info("split sizes: %s", sizes)
