"""Snakemake script: the pre-trained matrix of one block side (embinit.layers.pretrained.extract).

input:  vocab (vocabulary parquet) + one named input per file role of the source (vectors / index / weights /
        tokenizer), e.g. input.weights; auxiliary (the files of the other sources the policy reads; often none)
params: source (dict: the config `sources` entry), missing (str), missing_seed (int), missing_params (dict: the
        policy's entry of config embeddings.missing_params), missing_code (the policy's code_fingerprint: only
        triggers reruns), extensions (embinit.workflow.extensions.ExtensionFiles, loaded first so a missing-row policy
        they register is known); auxiliary, only where the policy reads other sources (dict: source name ->
        {source: its config entry, files: role -> path})
output: npy (N x D float32), meta (sidecar parquet: index, token, matched, filled)
log:    one file; the match report is logged there
"""

from embinit.interrupt import quiet_interrupt
from embinit.io import job_log
from embinit.layers.pretrained import extract

quiet_interrupt(snakemake)

with job_log(snakemake.log[0]):
    p, out = snakemake.params, snakemake.output
    p.extensions.load()
    files = {role: path for role, path in snakemake.input.items() if role not in ("vocab", "auxiliary")}
    extract(
        snakemake.input.vocab,
        p.source,
        files,
        p.missing,
        p.missing_seed,
        out.npy,
        out.meta,
        missing_params=p.missing_params,
        auxiliary=getattr(p, "auxiliary", {}),
        source_name=snakemake.config["blocks"][snakemake.wildcards.block]["sources"][snakemake.wildcards.side],
    )
