"""Snakemake script: place one raw file (mirror first, else its remote), verified by sha256.

params: remote (dict: the config `remotes` entry), settings (embinit.data.fetch.FetchSettings); output: the file;
log: one file. A fetch failure is one line there (and on stderr): no traceback, its message is the whole story.
"""

import logging

from embinit.data.fetch import FetchError, fetch
from embinit.interrupt import quiet_interrupt
from embinit.io import job_log

quiet_interrupt(snakemake)

with job_log(snakemake.log[0]):
    p = snakemake.params
    try:
        logging.info("%s", fetch(snakemake.wildcards.relpath, p.remote, snakemake.output[0], p.settings))
    except FetchError as err:
        logging.error("%s", err)
        raise SystemExit(str(err)) from None
