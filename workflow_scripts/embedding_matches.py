"""Snakemake script: matched / missing rows per block side (embinit.reports.matches.write_match_report).

params: entries (list of dicts: block, side, source, meta = one of the inputs); output: the CSV; log: one file
"""

from embinit.io import job_log
from embinit.reports.matches import write_match_report

with job_log(snakemake.log[0]):
    print(write_match_report(snakemake.params.entries, snakemake.output[0]).to_string(index=False))
