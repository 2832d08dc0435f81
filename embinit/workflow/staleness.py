"""Whether an output is stale, decided from the config and the results directory as its job enters the DAG.

Snakemake reruns a job whose params changed only while its own records (.snakemake/metadata) are there; from another
working directory, or after they are deleted, a stale output would look current. So a run's final.json and a layer's
sidecar hold the digest of the spec their job ran with, an aggregate's sidecar the digests of the records it read and of
its report code (embinit.identity.report_code), and this module compares them with what the config plans now (embinit.identity.records
says how). A stale output's job is forced (rules/common.smk: Snakemake has no per-file force flag, snakemake issue
#4254); nothing is written. Each output is judged when its job is planned, so a start pays for the jobs of its targets,
not for every job the config plans.
"""

from __future__ import annotations

from embinit.io import parquet_problem
from embinit.layers.initializers import layer_problem
from embinit.workflow.outputs import Output
from embinit.identity.records import aggregate_stale_reason, code_stale_reason, sidecar_of, stale_reason
from embinit.identity.report_code import report_code_digest
from embinit.workflow.plan import LayerKey, Plan, RunKey


def run_stale(plan: Plan, run: RunKey, code: str) -> str | None:
    """Why a run's record is stale: another training code than `code` (and not an accepted one), or another spec."""
    record = run.fill(plan.paths.final)
    accepted = plan.config["accepted_training_code"]
    return code_stale_reason(record, code, accepted) or stale_reason(record, plan.train_spec(run).digest)


def layer_stale(plan: Plan, layer: LayerKey) -> str | None:
    """Why a built layer is stale: another shape than its vocabulary and D, or another spec."""
    spec, built = plan.layer_spec(layer), plan.layer_file(layer)
    vocab = plan.layer_inputs(layer)["vocab"]
    return layer_problem(built, vocab, spec.dim) or stale_reason(sidecar_of(built), spec.digest, built)


def vocab_stale(plan: Plan, task: str, tokenizer: str) -> str | None:
    """Why a vocabulary job's outputs are stale: a Parquet file of them that does not read."""
    problems = [problem for problem in map(parquet_problem, plan.vocab_outputs(task, tokenizer)) if problem]
    return "; ".join(problems) or None


def output_stale(plan: Plan, out: Output) -> str | None:
    """Why an aggregate is stale: a record it read, or the report code that builds it, is missing or changed since it
    was built."""
    return aggregate_stale_reason(plan.first_output(out), plan.output_records(out), report_code_digest(out.name))
