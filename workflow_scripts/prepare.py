"""Snakemake script: one task's raw files -> Parquet splits (embinit.data.prepare).

input: the task's raw files by role (each a list, read in order); params: fmt (the task's format), drop_empty,
unescape_entities (config `tasks.<task>`); output: one Parquet file per split
"""

import logging

from embinit.data.prepare import ReadOptions, prepare
from embinit.io import job_log

with job_log(snakemake.log[0]):
    p = snakemake.params
    options = ReadOptions(drop_empty=p.drop_empty, unescape_entities=p.unescape_entities)
    sizes = prepare(p.fmt, dict(snakemake.input.items()), dict(snakemake.output.items()), options)
    logging.info("split sizes: %s", sizes)
