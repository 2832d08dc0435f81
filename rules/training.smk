# Stage 4, training (embinit/training, with the models of embinit/models): one job per (block, initializer,
# seed, variant), starting from the initializer's embedding layer(s).
from embinit.records import plan
from embinit.runsheet import plotted
from embinit.specs import train_spec
from embinit.training import Placement

PLOTTED = plotted(RUNS)  # the runs a figure draws validation BLEU of


def train_params(wc):
    drawn = (wc.block, wc.init, wc.variant) in PLOTTED
    return train_spec(config, wc.block, wc.init, int(wc.seed), wc.variant, drawn)


def train_inputs(wc):
    task = task_of(wc.block)
    inputs = {split: block_path(TOKENIZED, wc.block, split=split) for split in task_splits(task)}
    record = fill(FINAL, block=wc.block, init=wc.init, seed=wc.seed, variant=wc.variant)
    inputs["plan"] = plan(plan_path(wc, f"run_{wc.variant}"), record, train_params(wc))
    for side in sides_of(config, wc.block):
        inputs[f"emb_{side}"] = fill(EMBEDDING, block=wc.block, init=wc.init, seed=wc.seed, side=side)
    if evaluated_splits(task):
        inputs["detokenizer"] = block_path(DETOKENIZER, wc.block)
        for split in evaluated_splits(task):
            inputs[f"references_{split}"] = block_path(REFERENCES, wc.block, split=split)
    return inputs


rule train:
    input:
        unpack(train_inputs),
    output:
        final=FINAL,
        metrics=METRICS,
        embeddings=TRAINED,
    log:
        TRAIN_LOG,
    # profiles/slurm: k runs (--group-components train=k) in one allocation of one GPU (docs/performance.md)
    group:
        "train"
    conda:
        PIPELINE_ENV
    threads: 2
    resources:
        **job_resources(config["cluster"], gpu=True),
        gpu_jobs=1,  # profiles/local-gpu: k of these share one GPU (docs/performance.md)
        mem_mb=16000,
        runtime=lambda wc: 30 * config["blocks"][wc.block]["epochs"],
    params:
        spec=train_params,
        extensions=EXTENSIONS,
        # an object, which Snakemake leaves out of its rerun trigger: where a run runs is not what it is
        placement=Placement.from_config(config),
    script:
        "../workflow_scripts/train.py"
