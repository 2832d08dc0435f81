"""Snakemake script: place one raw file (mirror first, else its remote), verified by sha256.

A failure is logged as its one-line message before the job fails, so Snakemake's "check log file(s)" holds.
"""

import logging

from embinit.data.fetch import fetch

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
try:
    print(fetch(snakemake.wildcards.relpath, snakemake.params.remote, snakemake.output[0], snakemake.params.settings))
except Exception as err:
    logging.error("%s", err)
    raise
