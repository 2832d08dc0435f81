# Stage 2, embedding layers (embinit/layers): the pre-trained matrix of each block side, then one layer per
# initializer and seed.
from embinit.workflow.specs import missing_code
from embinit.workflow.paths import fill
from embinit.workflow.plan import LayerKey

AUXILIARY = W.auxiliary_sources()  # the sources the missing-row policy reads beside the block's


rule extract_embeddings:
    """Rows of the side's source for each vocabulary entry; missing words filled by `embeddings.missing`."""
    input:
        unpack(lambda wc: W.source_files(wc.block, wc.side)),
        vocab=lambda wc: W.block_path(P.vocab, wc.block, side=wc.side),
        auxiliary=[path for source in AUXILIARY.values() for path in source["files"].values()],
    output:
        npy=P.pretrained,
        meta=P.pretrained_tokens,
    log:
        fill(P.layers_log, name="extract_{side}"),
    conda:
        PIPELINE_ENV
    resources:
        **CPU_JOB,
        mem_mb=8000,
    params:
        # only where the policy reads other sources, so the default's params (its rerun trigger) stay as they were
        **({"auxiliary": AUXILIARY} if AUXILIARY else {}),
        source=lambda wc: config["sources"][W.source_of(wc.block, wc.side)],
        missing=config["embeddings"]["missing"],
        missing_params=config["embeddings"]["missing_params"].get(config["embeddings"]["missing"], {}),
        missing_seed=config["embeddings"]["missing_seed"],
        missing_code=missing_code(config),
        extensions=EXTENSIONS,
    script:
        "../workflow_scripts/extract_embeddings.py"


rule initialize_embedding:
    """The layer a run starts from. Its spec's `fingerprint` changes when this initializer's params or code change."""
    input:
        unpack(layer_inputs),
    output:
        npy=P.embedding,
    log:
        fill(P.layers_log, name="initialize_{init}_seed{seed}_{side}"),
    conda:
        PIPELINE_ENV
    resources:
        **CPU_JOB,
    params:
        spec=lambda wc: W.layer_spec(LayerKey.of(wc)).identity(),
        extensions=EXTENSIONS,
    script:
        "../workflow_scripts/initialize_embedding.py"
