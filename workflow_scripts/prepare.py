"""Snakemake script: one task's raw files -> Parquet splits (embinit.data.prepare).

input: the task's raw files by role (each a list, read in order); params: fmt (the task's format);
output: one Parquet file per split
"""

import logging

from embinit.data.prepare import prepare
from embinit.io import job_log

with job_log(snakemake.log[0]):
    sizes = prepare(snakemake.params.fmt, dict(snakemake.input.items()), dict(snakemake.output.items()))
    logging.info("split sizes: %s", sizes)
