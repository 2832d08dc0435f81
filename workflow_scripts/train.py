"""Snakemake script: train and score one run (embinit.training.loop.train_run; see it for the spec keys).

Expects:
  snakemake.input    train, valid, test (tokenized parquet; SST-2 has no test), emb_encoder, emb_decoder
                     (translation), and for translation detokenizer (the decoder's detokenizer file) and
                     references_valid, references_test (the BLEU references files), all of the vocab stage
  snakemake.params   spec (embinit.training.spec.RunSpec.identity(): plain values, which Snakemake's params
                     trigger compares; its digest goes into final.json); extensions
                     (embinit.workflow.extensions.ExtensionFiles: loaded first, so a position encoding they register is
                     known); placement
                     (embinit.training.Placement: device, threads, deterministic; an object so that it
                     triggers no rerun)
  snakemake.output   final (final.json), metrics (metrics.parquet), embeddings (embeddings.npz: the reported
                     state's input embedding layers), all in the run directory, where train_run writes them
  snakemake.threads  torch's CPU threads when placement.num_threads is 0
  snakemake.log[0]   this attempt's log; the run directory's train.log (train_run's default) gets every
                     attempt's lines, as Snakemake deletes a job's log before each attempt
"""

import logging
from pathlib import Path

from embinit.interrupt import quiet_interrupt
from embinit.training.loop import train_run
from embinit.training.spec import RunFiles, RunSpec

quiet_interrupt(snakemake)

snakemake.params.extensions.load()
out_dir = Path(snakemake.output.final).parent
if any(Path(path).parent != out_dir for path in snakemake.output):
    raise ValueError(f"final.json, metrics.parquet and embeddings.npz must share the run directory {out_dir}")
attempt = logging.FileHandler(snakemake.log[0], encoding="utf-8")
attempt.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
logging.getLogger("embinit.training").addHandler(attempt)  # train_run's log, RUN_LOG: this attempt's copy
placement = snakemake.params.placement.with_job_threads(snakemake.threads)
train_run(RunSpec.of(snakemake.params.spec), RunFiles.of(snakemake.input), out_dir, placement)
