"""Snakemake script: fetch every remote the configured blocks need, past failures; exit 1 listing each at the end.

log: the failures, as printed. params: remotes (relpath -> config `remotes` entry), raw_dir, settings
(embinit.data.fetch.FetchSettings).
"""

from embinit.data.preflight import prefetch
from embinit.interrupt import quiet_interrupt
from embinit.io import write_text_atomic

quiet_interrupt(snakemake)

p = snakemake.params
failures = prefetch(p.remotes, p.raw_dir, p.settings)
if failures:
    summary = f"prefetch: {len(failures)} of {len(p.remotes)} files failed:\n" + "\n".join(failures)
else:
    summary = f"prefetch: all {len(p.remotes)} files are in {p.raw_dir}"
write_text_atomic(snakemake.log[0], summary + "\n")
if failures:
    raise SystemExit(summary)
print(summary, flush=True)
