"""Snakemake `script:` of rule summary: the front page's figure and findings table (embinit.reports.summary).

params: sets (D -> result set folder), finding1 (the key of the set whose SST-2 runs show Finding 1);
output: png, svg (the figure), md (the findings table README.md holds)
"""

from pathlib import Path

from embinit.interrupt import quiet_interrupt
from embinit.io import job_log
from embinit.reports.summary import figure, findings_table

quiet_interrupt(snakemake)

with job_log(snakemake.log[0]):
    sets = {scale: Path(folder) for scale, folder in snakemake.params.sets.items()}
    figure(sets, snakemake.params.finding1, snakemake.output.png, snakemake.output.svg)
    Path(snakemake.output.md).write_text(findings_table(sets), encoding="utf-8")
