"""Snakemake script: matched / missing rows per block side (embinit.layers.pretrained.write_match_report).

params: entries (list of dicts: block, side, source, meta = one of the inputs); output: the CSV; log: one file
"""

from embinit.io import job_log
from embinit.layers.pretrained import write_match_report

with job_log(snakemake.log[0]):
    print(write_match_report(snakemake.params.entries, snakemake.output[0]).to_string(index=False))
