# Embedding layers: the pre-trained matrix of each block side, then one layer per initializer and seed.
from embinit.layers.initializers import INITIALIZERS, fingerprint, reads_pretrained


wildcard_constraints:
    init=_choice(INITIALIZERS),


def pretrained_path(block, side):
    return f"{RES}/{block}/pretrained_{side}.npy"


def embedding_path(block, init, seed, side):
    return f"{RES}/{block}/{init}/seed{seed}/embedding_{side}.npy"


rule extract_embeddings:
    """Rows of the side's source for each vocabulary entry; missing words filled by `embeddings.missing`."""
    input:
        unpack(
            lambda wc: {role: raw(p) for role, p in config["sources"][source_of(wc.block, wc.side)]["files"].items()}
        ),
        vocab=lambda wc: vocab_path(wc.block, wc.side),
    output:
        npy=f"{RES}/{{block}}/pretrained_{{side}}.npy",
        meta=f"{RES}/{{block}}/pretrained_{{side}}.parquet",
    log:
        f"{RES}/{{block}}/logs/extract_{{side}}.log",
    conda:
        PIPELINE_ENV
    resources:
        mem_mb=8000,
    params:
        source=lambda wc: config["sources"][source_of(wc.block, wc.side)],
        missing=config["embeddings"]["missing"],
        missing_seed=config["embeddings"]["missing_seed"],
    script:
        "../workflow_scripts/extract_embeddings.py"


rule initialize_embedding:
    """The layer a run starts from. `fingerprint` changes when this initializer's params or code change."""
    input:
        vocab=lambda wc: vocab_path(wc.block, wc.side),
        pretrained=lambda wc: (
            pretrained_path(wc.block, wc.side) if source_of(wc.block, wc.side) and reads_pretrained(wc.init) else []
        ),
    output:
        npy=f"{RES}/{{block}}/{{init}}/seed{{seed}}/embedding_{{side}}.npy",
    conda:
        PIPELINE_ENV
    params:
        initializer=lambda wc: wc.init,
        params=lambda wc: config["initializer_params"].get(wc.init, {}),
        fingerprint=lambda wc: fingerprint(wc.init, config["initializer_params"].get(wc.init, {})),
        seed=lambda wc: int(wc.seed),
        dim=lambda wc: dim_of(config, wc.block),
        side=lambda wc: wc.side,
    script:
        "../workflow_scripts/initialize_embedding.py"


def match_entries(blocks):
    return [
        {"block": b, "side": side, "source": source, "meta": f"{RES}/{b}/pretrained_{side}.parquet"}
        for b in blocks
        for side, source in config["blocks"][b]["sources"].items()
        if source is not None
    ]


rule embedding_matches:
    """Matched / missing vocabulary rows per block side (GloVe lacks some words; every LM row exists)."""
    input:
        [e["meta"] for e in match_entries(config["run_blocks"])],
    output:
        report(f"{RES}/embedding_matches.csv", caption="../report/embedding_matches.rst", category="Embeddings"),
    localrule: True
    params:
        entries=match_entries(config["run_blocks"]),
    run:
        from embinit.layers.pretrained import write_match_report

        print(write_match_report(params.entries, output[0]).to_string(index=False))
