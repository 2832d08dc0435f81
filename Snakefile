# Reproduction of "On Initializing Transformers with Pre-trained Embeddings" (arXiv 2407.12514).
# Stages, each a folder of embinit/ and a rule file (docs/design.md): data -> layers -> (models) training -> reports.
import os
import sys

from snakemake.utils import min_version

from embinit.workflow.checks import allowed_rules_exceeded, check, check_local_device, check_schema
from embinit.workflow.cluster import check_requests, requests_of
from embinit.workflow.config import add_hub_checkpoints, load, sides_of
from embinit.data.preflight import fetched_remotes, offline_problem
from embinit.workflow.outputs import targeted_outputs
from embinit.workflow.packs import write_pack_lists

min_version("9.0")

# Jobs import the embinit package of this checkout, also inside --sdm conda environments and on cluster nodes
# (a documented exception to snakemake --lint's envvars finding: docs/design.md "Lint").
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")]))

# Each error names its file or key, before any job. (--configfile files are parsed by snakemake's command line
# before this file runs; an empty or unparsable one fails there.)
load(f"{workflow.basedir}/config.yaml")


configfile: f"{workflow.basedir}/config.yaml"


check_schema(
    config, f"{workflow.basedir}/schemas/config.schema.yaml", workflow.configfiles, workflow.config_settings.config
)
add_hub_checkpoints(config)  # each hf_checkpoint source's files and remotes, from its hub id
check(config)
if not workflow.non_local_exec:  # a cluster's GPUs are on its nodes, checked by each job
    check_local_device(config)


report: "report/workflow.rst"


include: "rules/common.smk"


# A run while another holds the results dir: said before the DAG, where Snakemake would call the other run's unfinished
# jobs incomplete files and suggest --rerun-incomplete over them (whether this is a dry run is not known yet, and a
# dry run may look on; a real one stops at onstart); a pack's own Snakemake (--nolock) runs under its holder
if workflow.is_main_process and "--nolock" not in sys.argv and (holder := RESULTS_LOCK.holder()):
    print(
        f"embinit: results directory {RES} is in use by {holder}: a run started here stops before its first job, and "
        "the jobs that run is running are not incomplete files (no --rerun-incomplete over them)",
        file=sys.stderr,
    )


include: "rules/data.smk"
include: "rules/layers.smk"
include: "rules/training.smk"
include: "rules/reports.smk"


rule all:
    """The outputs config `outputs` names (all tables and the figure, by default) for the configured run_blocks."""
    input:
        [path for name in config["outputs"] for path in getattr(rules, name).output],
    localrule: True


rule vocabularies:
    """Tokenized splits and vocabularies of the run_blocks."""
    input:
        sorted({W.block_path(P.vocab, b, side=s) for b in config["run_blocks"] for s in sides_of(config, b)}),


onstart:
    # each registry entry in use, called once on a small input before any job; here, as it imports torch (3 s), which
    # parsing (a dry run, --list-rules, a job's own Snakemake) does without
    from embinit.workflow.trials import try_entries

    try_entries(config)
    planned = list(workflow.dag.needrun_jobs())
    # no mirror and no network: one message before any job, not each fetch job failing after its retries (with a
    # mirror, a file it lacks fails its own fetch job, whose log names the mirror's path and prefetch)
    if not config["mirror"] and (problem := offline_problem(fetched_remotes(planned), None)):
        raise SystemExit(problem)
    # --allowed-rules, held to: with a checkpoint rule (`pack`) Snakemake builds the DAG from every rule and still
    # plans a disallowed job whose input an allowed one rebuilds (a run's `train` after its layer), then runs it
    if beyond := allowed_rules_exceeded(workflow.dag_settings.allowed_rules, planned):
        raise SystemExit(beyond)
    if workflow.non_local_exec:  # profiles/slurm: what sbatch would refuse or leave pending fails before submission
        check_requests(config["cluster"], requests_of(planned))
        write_pack_lists(packs(), P.pack_runs, PACK_STAMP)
    if workflow.is_main_process and workflow.execution_settings.lock:
        RESULTS_LOCK.acquire()


onerror:
    RESULTS_LOCK.release()


onsuccess:
    RESULTS_LOCK.release()
    targets = workflow.dag_settings.targets or {"all"}  # the first rule, `all`, when none is named
    built = targeted_outputs(config, targets, RES)
    if not built:  # preflight, prefetch, runs, layers: their own lines say what they did
        print(f"\nDone: {', '.join(sorted(targets))}.")
    else:
        print(f"\nDone. Tables (CSV for code, Markdown to read) are in {RES}/: " + ", ".join(built) + ".")
    if "paper_comparison" in built:
        print(f"Start with {RES}/paper_comparison.md (ours beside the paper's, finding by finding).")
    if "all" in targets:
        print(
            "Next: the full offline run, --configfile config/offline-cpu.yaml (hours on 2 cores, in parts: README), "
            "or the paper's grid with internet and a GPU: snakemake --profile profiles/slurm results/table1.csv"
        )
