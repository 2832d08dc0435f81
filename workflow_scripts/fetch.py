"""Snakemake script: place one remote's files (one file, or the members of one archive), each from the mirror first,
else from one download of the remote, verified by sha256.

params: remotes (relpath -> config `remotes` entry, one url), settings (embinit.data.fetch.FetchSettings); output:
the files, in the order of `remotes`; log: one file. A fetch failure is one line there (and on stderr): no traceback,
its message is the whole story.
"""

import logging

from embinit.data.fetch import FetchError, fetch_members
from embinit.interrupt import quiet_interrupt
from embinit.io import job_log

quiet_interrupt(snakemake)

with job_log(snakemake.log[0]):
    p = snakemake.params
    try:
        for note in fetch_members(p.remotes, dict(zip(p.remotes, snakemake.output)), p.settings):
            logging.info("%s", note)
    except FetchError as err:
        logging.error("%s", err)
        raise SystemExit(str(err)) from None
