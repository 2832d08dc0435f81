"""Which outputs are stale, decided once from the config and the results directory, before the DAG is built.

Snakemake reruns a job whose params changed only while its own records (.snakemake/metadata) are there; from
another working directory, or after they are deleted, a stale output would look current. So a run's final.json and
a layer's sidecar hold the digest of the spec their job ran with, an aggregate's sidecar the digest of the records it
read, and this module compares them with what the config plans now (embinit.records says how). A stale output's job
is forced (rules/common.smk: Snakemake has no per-file force flag, snakemake issue #4254); nothing is written.
"""

from __future__ import annotations

from embinit.config import tokenizer_of
from embinit.io import parquet_problem
from embinit.layers.initializers import layer_problem
from embinit.outputs import OUTPUTS
from embinit.records import aggregate_stale_reason, code_stale_reason, sidecar_of, stale_reason
from embinit.workflow.plan import Plan


def stale_outputs(plan: Plan, code: str) -> dict[str, str]:
    """Each stale output of the plan's jobs (a file of the job) -> why: a run record of other code or spec, a layer
    of another spec or shape, a vocabulary job's unreadable Parquet file, an aggregate whose records changed."""
    config, paths, stale = plan.config, plan.paths, {}
    for run in plan.planned_runs():
        record = run.fill(paths.final)
        accepted = config["accepted_training_code"]
        reason = code_stale_reason(record, code, accepted) or stale_reason(record, plan.train_spec(run).digest)
        stale.update({record: reason} if reason else {})
    for layer in plan.planned_layers():
        spec, built = plan.layer_spec(layer), plan.layer_file(layer)
        vocab = plan.layer_inputs(layer)["vocab"]
        reason = layer_problem(built, vocab, spec.dim) or stale_reason(sidecar_of(built), spec.digest, built)
        stale.update({built: reason} if reason else {})
    for task, tokenizer in {(plan.task_of(b), tokenizer_of(config, b)) for b in config["blocks"]}:
        made = plan.vocab_outputs(task, tokenizer)
        if problems := [problem for problem in map(parquet_problem, made) if problem]:
            stale[made[0]] = "; ".join(problems)
    for out in OUTPUTS.values():
        first = plan.first_output(out)
        if reason := aggregate_stale_reason(first, plan.output_records(out)):
            stale[first] = reason
    return stale
