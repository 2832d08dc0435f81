# Stage 4, training (embinit/training, with the models of embinit/models): one job per (block, initializer,
# seed, variant), starting from the initializer's embedding layer(s).
from embinit.training import Placement


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
