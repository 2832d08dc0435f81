"""Snakemake script: the pre-trained matrix of one block side (embinit.layers.pretrained.extract).

input:  vocab (vocabulary parquet) + one named input per file role of the source (vectors / index / weights /
        tokenizer), e.g. input.weights
params: source (dict: the config `sources` entry), missing (str), missing_seed (int)
output: npy (N x D float32), meta (sidecar parquet: index, token, matched)
log:    one file; the match report is logged there
"""

from embinit.io import job_log
from embinit.layers.pretrained import extract

with job_log(snakemake.log[0]):
    files = {role: path for role, path in snakemake.input.items() if role != "vocab"}
    p, out = snakemake.params, snakemake.output
    extract(snakemake.input.vocab, p.source, files, p.missing, p.missing_seed, out.npy, out.meta)
