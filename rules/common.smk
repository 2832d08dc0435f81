# The configuration's plan (embinit.workflow: paths, run and layer sheets, stale outputs, packs) and the rule files'
# lookups over it, one line each. Names follow docs/design.md.
import functools
import os
import re
import sys
import time

from embinit.workflow.cluster import job_resources
from embinit.workflow.extensions import ExtensionFiles
from embinit.layers.initializers import INITIALIZERS
from embinit.workflow.outputs import generated_initializers, variants_of
from embinit.identity.records import ResultsLock
from embinit.identity.training_code import code_digest
from embinit.workflow.packs import planned_packs, read_pack_list
from embinit.workflow.paths import fill
from embinit.workflow.plan import LayerKey, Plan, RunKey
from embinit.workflow.staleness import layer_stale, output_stale, run_stale, vocab_stale

PIPELINE_ENV = "../envs/pipeline.yaml"
CPU_JOB = job_resources(config["cluster"], gpu=False)  # profiles/slurm: the site's account and partition
RES = config["results_dir"]
RESULTS_LOCK = ResultsLock(RES)
EXTENSIONS = ExtensionFiles(tuple(config["extensions"]))  # jobs load them again; their params say what they use
W = Plan.of(config)
P = W.paths
# A pack: runs trained in one job of one GPU (under a cluster executor, or stacked in one process under any), this
# invocation's alone
PACK_STAMP = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
STACKED = str(config["cluster"]["stack"]) in ("True", "true")  # --config cluster='{stack: true}' gives the text


def _choice(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    block=_choice(config["blocks"]),
    side="encoder|decoder",
    seed=r"\d+",
    variant=_choice(variants_of(config)),
    init=_choice([*INITIALIZERS, *config["initializer_params"], *generated_initializers(config)]),


STALE = {}  # output -> why it is stale (None: current), judged once, as its job enters the DAG


def forced(path, why):
    """Marks a stale output's job forced in the DAG being built, saying why once (Snakemake has no per-file force
    flag: snakemake issue #4254); `why()` judges it, in the Snakemake that plans the jobs (one on a cluster node runs
    the job it is given). An output not stale is left to Snakemake's own rules."""
    if workflow.is_main_process and path not in STALE:
        STALE[path] = why()
    if STALE.get(path) and path not in workflow.dag.forcefiles:
        workflow.dag.forcefiles.add(path)
        print(f"embinit: stale output, its job reruns: {STALE[path]}", file=sys.stderr)


@functools.cache
def training_code():
    """The digest a run record of today's code holds: computed once, for the first run that enters the DAG."""
    return code_digest()


def vocab_inputs(task):
    def inputs(wc):
        forced(W.vocab_outputs(task, wc.tokenizer)[0], lambda: vocab_stale(W, task, wc.tokenizer))
        splits = {s: fill(P.prepared, task=task, split=s) for s in W.task_splits(task)}
        return splits | {"tokenizer_file": W.tokenizer_input(wc.tokenizer)}

    return inputs


def layer_inputs(wc):
    forced(W.layer_file(layer := LayerKey.of(wc)), lambda: layer_stale(W, layer))
    return W.layer_inputs(layer)


def train_inputs(wc):
    """A run's inputs; a packed one's wait for its pack, whose job trains it (Snakemake then finds it current)."""
    run = RunKey.of(wc)
    if (index := pack_of(run)) is not None:
        checkpoints.pack.get(stamp=PACK_STAMP, index=index)
    else:
        forced(run.fill(P.final), lambda: run_stale(W, run, training_code()))
    return W.run_inputs(run)


def output_inputs(out):
    def inputs(wc):
        forced(W.first_output(out), lambda: output_stale(W, out))
        return W.output_inputs(out, workflow.basedir)

    return inputs


def on_dag(lookup, out):
    """`lookup(out)` as a params function: an output's sheet rows are computed when its job enters the DAG, so a
    start that plans no report pays for none."""
    return lambda wc: lookup(out)


@functools.cache
def packs():
    """This invocation's packs, planned while the DAG is built (the executor and targets are known only then)."""
    k = int(config["cluster"]["pack"])  # --config cluster='{pack: 2}' gives the text '2'
    if not ((workflow.non_local_exec or STACKED) and workflow.is_main_process and k > 1):
        return []
    targets = workflow.dag_settings.targets or {"all"}
    return planned_packs(W, targets, lambda run: run_stale(W, run, training_code()), k, STACKED)


def pack_of(run):
    return next((index for index, members in enumerate(packs()) if run in members), None)


def pack_runs(wc):
    """As planned, in the main process that planned them; else as its onstart wrote them down."""
    if wc.stamp == PACK_STAMP and packs():
        return packs()[int(wc.index)]
    return read_pack_list(fill(P.pack_runs, stamp=wc.stamp, index=wc.index))


def pack_inputs(wc):
    return sorted({path for run in pack_runs(wc) for path in W.run_inputs(run).values()})


def train_resource(name):
    """Rule train's resource `name` for each of a pack's runs (--set-resources train:... included)."""
    resource = rules.train.rule.resources[name]

    def values(wc):  # a RunKey has a run's wildcards as attributes
        return [resource.evaluate(run).value if resource.is_evaluable() else resource.value for run in pack_runs(wc)]

    return values
