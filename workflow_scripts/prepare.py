"""Snakemake script: one task's raw files or Hugging Face dataset -> Parquet splits (embinit.data.prepare).

input: the task's raw files by role (each a list, read in order), or a hf_dataset task's save_to_disk folder;
params: fmt (the task's format), drop_empty and unescape_entities (config `tasks.<task>`) and, for hf_dataset, task,
kind, num_classes and dataset (its config entry's); output: one Parquet file per split
"""

import logging

from embinit.data import hf_dataset
from embinit.data.prepare import ReadOptions, prepare
from embinit.interrupt import quiet_interrupt
from embinit.io import job_log

quiet_interrupt(snakemake)

with job_log(snakemake.log[0]):
    p, outputs = snakemake.params, dict(snakemake.output.items())
    if p.fmt == "hf_dataset":
        dataset = hf_dataset.HFDataset.from_config(p.task, p.kind, p.dataset, p.num_classes)
        sizes = hf_dataset.prepare(dataset, outputs)
    else:
        options = ReadOptions(p.drop_empty, p.unescape_entities, p.get("train_rows"))
        sizes = prepare(p.fmt, dict(snakemake.input.items()), outputs, options)
    logging.info("split sizes: %s", sizes)
