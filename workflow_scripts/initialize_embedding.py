"""Snakemake script: the embedding layer one run starts from (embinit.layers.initializers.initialize_file).

input:  vocab (vocabulary parquet: N = its rows), pretrained (pretrained_<side>.npy; leave it out when the side
        has no source: the layer is then Xavier)
params: initializer (str), params (dict: config initializer_params entry), seed (int), dim (int: D),
        side (str: mixed into the seed), fingerprint (str: embinit.layers.initializers.fingerprint; only triggers
        reruns), extensions (embinit.extensions.ExtensionFiles, loaded first so an initializer they register is
        known)
output: npy (N x D float32); log: one file
"""

from embinit.io import job_log
from embinit.layers.initializers import initialize_file

with job_log(snakemake.log[0]):
    p = snakemake.params
    p.extensions.load()
    initialize_file(
        p.initializer,
        snakemake.input.get("pretrained"),
        snakemake.input.vocab,
        p.dim,
        p.seed,
        p.params,
        snakemake.output.npy,
        side=p.side,
    )
