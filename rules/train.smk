# One training job per (block, initializer, seed, variant): starts from the initializer's embedding layer(s).


def run_dir(block, init, seed, variant):
    return f"{RES}/{block}/{init}/seed{seed}/{variant}"


def train_inputs(wc):
    task = config["tasks"][task_of(wc.block)]
    inputs = {split: tokenized_path(wc.block, split) for split in splits_of_task(task_of(wc.block))}
    for side in sides_of(config, wc.block):
        inputs[f"emb_{side}"] = embedding_path(wc.block, wc.init, wc.seed, side)
        inputs[f"vocab_{side}"] = vocab_path(wc.block, side)
    if task["kind"] == "translation" and tokenizer_file(wc.block):
        inputs["tokenizer_file"] = tokenizer_file(wc.block)
    return inputs


def train_spec(wc):
    """Everything a run depends on (a change reruns it), except where it runs (device, threads)."""
    block, task = config["blocks"][wc.block], config["tasks"][task_of(wc.block)]
    return {
        "kind": task["kind"],
        "model": config["model"],
        "train": {k: v for k, v in config["train"].items() if k not in ("device", "num_threads")},
        "variant": config["variants"][wc.variant],
        "epochs": block["epochs"],
        "batch_size": block["batch_size"],
        "lr": task["lr"],
        "seed": int(wc.seed),
        "valid_bleu": valid_bleu_of(config, wc.block, wc.init, wc.variant),
        "num_classes": task.get("num_classes"),
        "tokenizer": tokenizer_of(config, wc.block),
        "languages": task["languages"],
        "run": {
            "block": wc.block,
            "task": task_of(wc.block),
            "initializer": wc.init,
            "seed": int(wc.seed),
            "variant": wc.variant,
        },
    }


rule train:
    input:
        unpack(train_inputs),
    output:
        final=f"{RES}/{{block}}/{{init}}/seed{{seed}}/{{variant}}/final.json",
        metrics=f"{RES}/{{block}}/{{init}}/seed{{seed}}/{{variant}}/metrics.parquet",
    log:
        f"{RES}/{{block}}/{{init}}/seed{{seed}}/{{variant}}/train.log",
    conda:
        PIPELINE_ENV
    threads: 2
    resources:
        gpu=1,
        gpu_jobs=1,  # profiles/local-gpu: k of these share one GPU (docs/performance.md)
        mem_mb=16000,
        runtime=lambda wc: 30 * config["blocks"][wc.block]["epochs"],
    params:
        spec=train_spec,
    script:
        "../workflow_scripts/train.py"


def base_runs(blocks, initializers=None, variant="base", seeds=None):
    """final.json of every seed of every (block, initializer) for one variant; `seeds` maps a block to
    another number of seeds than its own (Figure 1 averages five seeds of Multi30k GloVe)."""
    seeds = seeds or {}
    return [
        f"{run_dir(b, i, s, variant)}/final.json"
        for b in blocks
        for i in initializers_of(config, b)
        if initializers is None or i in initializers
        for s in range(seeds.get(b, len(seeds_of(config, b))))
    ]


def blocks_running(initializer):
    """The run_blocks that train `initializer` (the paper ran Xavier_Pretrained only on BERT and T5)."""
    return [b for b in config["run_blocks"] if initializer in initializers_of(config, b)]
