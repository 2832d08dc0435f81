"""Snakemake script: the embedding layer one run starts from (embinit.layers.initializers.initialize_file).

input:  vocab (vocabulary parquet: N = its rows), pretrained (pretrained_<side>.npy; leave it out when the side
        has no source: the layer is then Xavier)
params: spec (embinit.layers.initializers.LayerSpec.identity(): plain values, which Snakemake's params trigger
        compares), extensions
        (embinit.workflow.extensions.ExtensionFiles, loaded first so an initializer they register is known)
output: npy (N x D float32), with the spec's digest beside it (embinit.identity.records.sidecar_of); log: one file
"""

from embinit.interrupt import quiet_interrupt
from embinit.io import job_log
from embinit.layers.initializers import LayerSpec, initialize_file
from embinit.identity.records import write_sidecar

quiet_interrupt(snakemake)

with job_log(snakemake.log[0]):
    spec = LayerSpec.of(snakemake.params.spec)
    snakemake.params.extensions.load()
    initialize_file(
        spec.initializer,
        snakemake.input.get("pretrained"),
        snakemake.input.vocab,
        spec.dim,
        spec.seed,
        spec.params,
        snakemake.output.npy,
        side=spec.side,
    )
    write_sidecar(snakemake.output.npy, spec.digest)
