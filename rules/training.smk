# Stage 4, training (embinit/training, with the models of embinit/models): one job per (block, initializer,
# seed, variant), starting from the initializer's embedding layer(s).
from embinit.workflow.cluster import job_resources
from embinit.training import Placement
from embinit.workflow.paths import fill
from embinit.workflow.plan import RunKey


rule train:
    input:
        unpack(train_inputs),
    output:
        final=P.final,
        metrics=P.metrics,
        embeddings=P.trained,
    log:
        P.attempt_log,
    conda:
        PIPELINE_ENV
    threads: 2
    resources:
        **job_resources(config["cluster"], gpu=True),
        gpu_jobs=1,  # profiles/local-gpu: k of these share one GPU (docs/performance.md)
        mem_mb=16000,
        runtime=lambda wc: 30 * config["blocks"][wc.block]["epochs"],
    params:
        spec=lambda wc: W.train_spec(RunKey.of(wc)).identity(),
        extensions=EXTENSIONS,
        # an object, which Snakemake leaves out of its rerun trigger: where a run runs is not what it is
        placement=Placement.from_config(config),
    script:
        "../workflow_scripts/train.py"


checkpoint pack:
    """Under a cluster executor: the runs of one pack (config cluster.pack) trained at the same time in one job of
    one GPU, each its own Snakemake job, so a pack cut short keeps the runs it finished. (A Snakemake group would run
    its jobs one after another: snakemake-executor-plugin-slurm issue #469.) With cluster.stack, under any executor:
    one block's runs in one process, as stacks (embinit.training.stacked)."""
    input:
        pack_inputs,
    output:
        P.pack,
    log:
        P.pack_log,
    wildcard_constraints:
        stamp=r"[0-9T]+-[0-9]+",
        index=r"\d+",
    conda:
        PIPELINE_ENV  # it holds snakemake: the Snakemake inside the job runs from it
    # a stack is one process: one run's threads
    threads: lambda wc: (max if STACKED else sum)(train_resource("_cores")(wc))
    resources:
        **job_resources(config["cluster"], gpu=True),
        gpu_jobs=1,  # profiles/local-gpu: a stacked pack holds one of the GPU's slots
        mem_mb=lambda wc: sum(train_resource("mem_mb")(wc)),
        # the runs share the GPU and train side by side: the longest run's time (docs/performance.md)
        runtime=lambda wc: max(train_resource("runtime")(wc)),
    params:
        runs=lambda wc: [run.fill(P.final) for run in pack_runs(wc)],
        train_threads=lambda wc: max(train_resource("_cores")(wc)),
        # what the config is made of (config files and --config), for the Snakemake inside the job
        config=workflow.config_settings.overwrite_config,
        snakefile=workflow.main_snakefile,
        deployment=sorted(m.item_to_choice() for m in workflow.deployment_settings.deployment_method),
        stack=STACKED,
        # cluster.stack: each run's spec and input files, for the stack that trains them in this job
        members=lambda wc: [(W.train_spec(run).identity(), W.run_inputs(run)) for run in pack_runs(wc)],
        extensions=EXTENSIONS,
        placement=Placement.from_config(config),
    script:
        "../workflow_scripts/pack.py"
