"""Snakemake script: the preflight table of every remote the configured blocks need; exit 1 unless all are ready.

log: the table, as printed. params: remotes (relpath -> config `remotes` entry), raw_dir, settings
(embinit.data.fetch.FetchSettings).
"""

from embinit.data.preflight import preflight, render
from embinit.interrupt import quiet_interrupt
from embinit.io import write_text_atomic

quiet_interrupt(snakemake)

p = snakemake.params
rows, offline = preflight(p.remotes, p.raw_dir, p.settings)
report = render(rows, offline)
write_text_atomic(snakemake.log[0], report + "\n")
print(report, flush=True)
if any(r.verdict != "ok" for r in rows):
    raise SystemExit(1)
