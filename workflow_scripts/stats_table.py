"""Snakemake script: a statistics table (embinit.reports.statistics), chosen by params.table.

Tables 2 and 8: params.entries = list of dicts (block, task, family, initializer, path: one of the inputs).
Table 6: inputs named by initializer (input.Xavier, input.Pretrained, input.Pretrained_Xavier, in row order);
         params.src (display name, e.g. "GloVe"), params.pos_rows (rows of P), params.pos_base.
output: csv, md
"""

from embinit.reports.statistics import write_stats_table, write_table6

p, out = snakemake.params, snakemake.output
if int(p.table) == 6:
    write_table6(dict(snakemake.input.items()), p.src, p.pos_rows, p.pos_base, out.csv, out.md)
else:
    write_stats_table(p.entries, out.csv, out.md)
