# Stage 2, embedding layers (embinit/layers): the pre-trained matrix of each block side, then one layer per
# initializer and seed.
from embinit.layers.initializers import reads_pretrained
from embinit.records import plan, sidecar_of
from embinit.specs import layer_spec, missing_code


def source_files(wc):
    """The raw files of the block side's pre-trained source, by role (vectors, index, weights, tokenizer)."""
    return {role: raw(p) for role, p in config["sources"][source_of(wc.block, wc.side)]["files"].items()}


def layer_params(wc):
    return layer_spec(config, wc.block, wc.init, int(wc.seed), wc.side)


def layer_inputs(wc):
    layer = fill(EMBEDDING, block=wc.block, init=wc.init, seed=wc.seed, side=wc.side)
    pretrained = source_of(wc.block, wc.side) and reads_pretrained(wc.init)  # Xavier reads only N and D
    return {
        "vocab": block_path(VOCAB, wc.block, side=wc.side),
        "pretrained": fill(PRETRAINED, block=wc.block, side=wc.side) if pretrained else [],
        "plan": plan(plan_path(wc, f"layer_{wc.side}"), sidecar_of(layer), layer_params(wc)),
    }


rule extract_embeddings:
    """Rows of the side's source for each vocabulary entry; missing words filled by `embeddings.missing`."""
    input:
        unpack(source_files),
        vocab=lambda wc: block_path(VOCAB, wc.block, side=wc.side),
    output:
        npy=PRETRAINED,
        meta=PRETRAINED_TOKENS,
    log:
        fill(LAYERS_LOG, name="extract_{side}"),
    conda:
        PIPELINE_ENV
    resources:
        **CPU_JOB,
        mem_mb=8000,
    params:
        source=lambda wc: config["sources"][source_of(wc.block, wc.side)],
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
        npy=EMBEDDING,
    log:
        fill(LAYERS_LOG, name="initialize_{init}_seed{seed}_{side}"),
    conda:
        PIPELINE_ENV
    resources:
        **CPU_JOB,
    params:
        spec=layer_params,
        extensions=EXTENSIONS,
    script:
        "../workflow_scripts/initialize_embedding.py"
