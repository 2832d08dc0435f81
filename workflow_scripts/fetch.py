"""Snakemake script: place one raw file (mirror first, else its remote), verified by sha256."""
import logging

from embinit.fetch import fetch

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
print(fetch(snakemake.wildcards.relpath, snakemake.params.remote, snakemake.output[0], snakemake.config["mirror"]))
