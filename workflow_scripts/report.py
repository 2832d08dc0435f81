"""Snakemake `script:` for every output's rule (rules/reports.smk): the builder of its name (embinit.reports.builders).

Expects:
  snakemake.params.output  the output's name (a key of embinit.workflow.outputs.OUTPUTS)
  snakemake.params.rows    its run sheet rows (embinit.workflow.runsheet.run_sheet), each naming its files (the inputs)
  snakemake.params.layers  its layer sheet rows (embinit.workflow.runsheet.layer_sheet), each naming its file (an input)
  snakemake.params.config  the config sections its builder reads (empty for most)
  snakemake.params.seeded  the paper comparison's only: the tables whose findings are judged paired by seed
  snakemake.params.records the records it reads (runs' final.json and metrics, compared tables); their digest and
                           its builder's code digest (embinit.identity.report_code) go beside its first output when it is
                           built (embinit.identity.records.aggregate_stale_reason)
  snakemake.output         its files by format (Output.formats: a table's `csv` and `md`, a figure's `png` and
                           `csv`), or a folder's `folder`
  snakemake.log[0]         the job's log
"""

import logging

from embinit.interrupt import quiet_interrupt
from embinit.io import job_log
from embinit.identity.records import write_aggregate_sidecar
from embinit.reports import builders
from embinit.identity.report_code import report_code_digest

quiet_interrupt(snakemake)

with job_log(snakemake.log[0]):
    name = snakemake.params.output
    result = getattr(builders, name)(snakemake)
    logging.info("%s: %d rows -> %s", name, len(result), ", ".join(snakemake.output))
    write_aggregate_sidecar(snakemake.output[0], snakemake.params.records, report_code_digest(name))
