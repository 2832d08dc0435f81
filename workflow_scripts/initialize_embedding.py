"""Snakemake script: the embedding layer one run starts from (embinit.layers.initializers.initialize_file).

input:  vocab (vocabulary parquet: N = its rows), pretrained (pretrained_<side>.npy; leave it out when the side
        has no source: the layer is then Xavier)
params: initializer (str), params (dict: config initializer_params entry), seed (int), dim (int: D),
        side (str: mixed into the seed), fingerprint (str: embinit.layers.initializers.fingerprint; only triggers reruns)
output: npy (N x D float32)
"""

from embinit.layers.initializers import initialize_file

p = snakemake.params
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
