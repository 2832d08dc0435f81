# Shared names: every artifact's path template (once), the run and layer sheets over the config, and the input
# functions the rule files call (Snakemake's lint keeps functions apart from rules). Names follow docs/design.md.
import functools
import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

from snakemake.exceptions import WorkflowError

from embinit.cluster import job_resources, packs
from embinit.config import evaluated_splits, missing_setting, sides_of, task_sides, tokenizer_of
from embinit.data.hf_dataset import is_saved, saved_files
from embinit.data.prepare import splits_of
from embinit.extensions import ExtensionFiles
from embinit.io import parquet_problem
from embinit.layers.initializers import INITIALIZERS, layer_problem, reads_pretrained
from embinit.layers.missing import source_names
from embinit.outputs import OUTPUTS, generated_initializers, layer_recipe, seeded_tables, targeted_outputs, variants_of
from embinit.records import ResultsLock, code_stale_reason, plan, plan_aggregate, plan_check, sidecar_of, stale_reason
from embinit.runsheet import EVERY_RUN_COLUMNS, layer_sheet, plotted, recorded_runs, run_sheet
from embinit.specs import layer_spec, train_spec
from embinit.training.digest import code_digest

PIPELINE_ENV = "../envs/pipeline.yaml"
# profiles/slurm: the site's account and partition (config `cluster`) for every job that does not train
CPU_JOB = job_resources(config["cluster"], gpu=False)
DATA = config["data_dir"]
RES = config["results_dir"]
RESULTS_LOCK = ResultsLock(RES)
# Jobs load the extension files again; what a job uses of them is in its params (embinit.specs)
EXTENSIONS = ExtensionFiles(tuple(config["extensions"]))
# The training code's digest: a run record of other code is stale unless config accepted_training_code lists it
TRAINING_CODE = code_digest()

# Artifact paths; {braces} are wildcards. Data stage (under data_dir):
RAW = f"{DATA}/raw/{{relpath}}"
PREPARED = f"{DATA}/prepared/{{task}}/{{split}}.parquet"
VOCAB = f"{DATA}/vocab/{{task}}/{{tokenizer}}/{{side}}.parquet"
TOKENIZED = f"{DATA}/tokenized/{{task}}/{{tokenizer}}/{{split}}.parquet"
DETOKENIZER = f"{DATA}/vocab/{{task}}/{{tokenizer}}/detokenizer.json"  # decoder ids -> tokens and text (BLEU)
REFERENCES = f"{DATA}/references/{{task}}/{{tokenizer}}/{{split}}.parquet"  # BLEU references of a split
DATA_LOG = f"{DATA}/logs/{{stage}}/{{name}}.log"
CHECK = f"{DATA}/.plans/{{stage}}/{{name}}/plan.json"  # a job whose outputs a check found damaged reruns
# Layers stage (under results_dir):
PRETRAINED = f"{RES}/{{block}}/pretrained_{{side}}.npy"
PRETRAINED_TOKENS = f"{RES}/{{block}}/pretrained_{{side}}.parquet"  # row -> token, matched or filled
EMBEDDING = f"{RES}/{{block}}/{{init}}/seed{{seed}}/embedding_{{side}}.npy"
LAYERS_LOG = f"{RES}/{{block}}/logs/{{name}}.log"
# Training stage: one directory per run.
RUN = f"{RES}/{{block}}/{{init}}/seed{{seed}}/{{variant}}"
FINAL = f"{RUN}/final.json"
METRICS = f"{RUN}/metrics.parquet"
TRAINED = f"{RUN}/embeddings.npz"  # the reported state's input embedding layers, by side
# the job's log, this attempt's lines (Snakemake deletes it as a job starts); the run's train.log beside it, which
# train_run appends to, keeps every attempt's, so a resumed run keeps what the cut one logged
TRAIN_ATTEMPT_LOG = f"{RUN}/attempt.log"
# Under a cluster executor (under any with cluster.stack), a pack of runs trained at the same time in one job of one
# GPU (stacked, in one process), this invocation's alone (its stamp). Its files are the runs it holds (written while
# the DAG is built), its record (written when they all trained) and its log (the Snakemake inside the job; stacked,
# which runs it trains, each run's lines in its own train.log)
PACK_STAMP = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
PACK_RUNS = f"{RES}/.packs/{{stamp}}/pack{{index}}.runs.json"
PACK = f"{RES}/.packs/{{stamp}}/pack{{index}}.json"
PACK_LOG = f"{RES}/.packs/{{stamp}}/pack{{index}}.log"
STACKED = str(config["cluster"]["stack"]) in ("True", "true")  # --config cluster='{stack: true}' gives the text
# What the config plans for a layer or a run (embinit.records.plan: a stale output reruns its job), each file alone
# in its own directory, made when the file is: Snakemake takes a file missing that appears in a directory it has
# already listed while building the DAG
PLAN = f"{RES}/.plans/{{block}}/{{init}}/seed{{seed}}/{{job}}/plan.json"
OUTPUT_PLAN = f"{RES}/.plans/outputs/{{name}}/plan.json"  # the records an output reads (plan_aggregate)
# Reports stage: an output of config `outputs` (embinit/outputs.py) is {RES}/<name>.csv (+ .md), or .png (+ .csv).
TABLE = f"{RES}/{{name}}.csv"
TABLE_MD = f"{RES}/{{name}}.md"
FIGURE = f"{RES}/{{name}}.png"
TABLE_AS = f"{RES}/{{name}}.{{suffix}}"  # a table's other formats (Output.extra): parquet, html
FOLDER = f"{RES}/{{name}}"  # an output that is a folder: TensorBoard's event files, the exported layers
REPORTS_LOG = f"{RES}/logs/{{name}}.log"

# The run sheet (embinit.runsheet): one row per (output, run) it shows, with the run records found for the outputs of
# every run; the layer sheet: one per (output, layer file)
RUN_FILES = {"final": FINAL, "metrics": METRICS, "trained": TRAINED, "run": RUN}
RUNS = run_sheet(config, RUN_FILES, recorded_runs(config, RES))
LAYER_FILES = {
    "layer": EMBEDDING,
    "pretrained": PRETRAINED,
    "tokens": PRETRAINED_TOKENS,
    "vocab": VOCAB,
    "tokenizer": RAW,
}
LAYERS = layer_sheet(config, RUNS, LAYER_FILES)
PLOTTED = plotted(RUNS)  # the runs a figure draws validation BLEU of


def fill(template, **wildcards):
    """`template` with the given wildcards filled in; the others stay wildcards."""
    return expand(template, **wildcards, allow_missing=True)[0]


def _choice(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    block=_choice(config["blocks"]),
    side="encoder|decoder",
    seed=r"\d+",
    variant=_choice(variants_of(config)),
    init=_choice([*INITIALIZERS, *config["initializer_params"], *generated_initializers(config)]),


def raw(relpath):
    return fill(RAW, relpath=relpath)


def auxiliary_sources():
    """The other sources the missing-row policy reads (`focus`'s auxiliary space), by name: its config entry and
    its raw files by role; none for the built-in default."""
    return {
        name: {
            "source": config["sources"][name],
            "files": {role: raw(p) for role, p in config["sources"][name]["files"].items()},
        }
        for name in source_names(*missing_setting(config))
    }


AUXILIARY = auxiliary_sources()


def task_of(block):
    return config["blocks"][block]["task"]


def source_of(block, side):
    return config["blocks"][block]["sources"][side]


def task_splits(task):
    return splits_of(config["tasks"][task])


def dataset_folder(task):
    """The files of the `save_to_disk` folder a hf_dataset task reads, as its input, so a dataset saved anew
    reruns it (a folder's own time changes only when an entry is added or removed); none for a hub id."""
    dataset = config["tasks"][task].get("dataset")
    if not (dataset and is_saved(dataset["path"])):
        return {}
    return {"dataset": saved_files(dataset["path"])}


def prepare_params(task):
    """What a task's prepare job reads beyond its format and files, as plain values so a changed one reruns it: a
    hf_dataset task's fields and splits, a file format's reading options (config `tasks.<task>`)."""
    entry = config["tasks"][task]
    if entry["format"] == "hf_dataset":
        return {
            "task": task,
            "kind": entry["kind"],
            "num_classes": entry.get("num_classes"),
            "dataset": entry["dataset"],
        }
    return {"drop_empty": entry["drop_empty"], "unescape_entities": entry.get("unescape_entities", False)}


def block_path(template, block, **wildcards):
    """A data-stage path of a block: its task and tokenizer filled in."""
    return fill(template, task=task_of(block), tokenizer=tokenizer_of(config, block), **wildcards)


def plan_path(wc, job):
    return fill(PLAN, block=wc.block, init=wc.init, seed=wc.seed, job=job)


def tokenizer_input(wc):
    """The raw tokenizer file a sub-word vocabulary reads (none for spaCy)."""
    return [] if wc.tokenizer == "spacy" else raw(config["sources"][wc.tokenizer]["files"]["tokenizer"])


def source_files(wc):
    """The raw files of the block side's pre-trained source, by role (vectors, index, weights, tokenizer)."""
    return {role: raw(p) for role, p in config["sources"][source_of(wc.block, wc.side)]["files"].items()}


def layer_params(wc):
    return layer_spec(config, wc.block, wc.init, int(wc.seed), wc.side)


def layer_inputs(wc):
    layer = fill(EMBEDDING, block=wc.block, init=wc.init, seed=wc.seed, side=wc.side)
    entry = layer_recipe(config, wc.init)[0]
    pretrained = source_of(wc.block, wc.side) and reads_pretrained(entry)  # Xavier reads only N and D
    vocab, spec = block_path(VOCAB, wc.block, side=wc.side), layer_params(wc)
    problem = layer_problem(layer, vocab, spec["dim"])  # a layer cut or replaced after its job: rebuilt
    return {
        "vocab": vocab,
        "pretrained": fill(PRETRAINED, block=wc.block, side=wc.side) if pretrained else [],
        "plan": plan(plan_path(wc, f"layer_{wc.side}"), sidecar_of(layer), spec, layer, problem),
    }


def train_params(wc):
    drawn = (wc.block, wc.init, wc.variant) in PLOTTED
    return train_spec(config, wc.block, wc.init, int(wc.seed), wc.variant, drawn)


def train_inputs(wc):
    """A run's inputs; under a cluster executor, none until its pack ran in this invocation (its job trains the run,
    then Snakemake finds the run up to date)."""
    inputs = run_inputs(wc)
    index = pack_of(wc)
    if index is not None:
        checkpoints.pack.get(stamp=PACK_STAMP, index=index)
    return inputs


def run_inputs(wc):
    task = task_of(wc.block)
    inputs = {split: block_path(TOKENIZED, wc.block, split=split) for split in task_splits(task)}
    record = fill(FINAL, block=wc.block, init=wc.init, seed=wc.seed, variant=wc.variant)
    inputs["plan"] = plan(plan_path(wc, f"run_{wc.variant}"), record, train_params(wc), problem=code_problem(record))
    for side in sides_of(config, wc.block):
        inputs[f"emb_{side}"] = fill(EMBEDDING, block=wc.block, init=wc.init, seed=wc.seed, side=side)
    if evaluated_splits(config, task):  # BLEU's
        inputs["detokenizer"] = block_path(DETOKENIZER, wc.block)
    for split in evaluated_splits(config, task):
        inputs[f"references_{split}"] = block_path(REFERENCES, wc.block, split=split)
    return inputs


@functools.cache
def planned_packs():
    """This invocation's packs, in the main process of a cluster run (of any run with cluster.stack, one block's runs
    to a pack) with config cluster.pack > 1: the runs its targets need (an output that shows them, or one of their
    files) whose records are missing or stale, k to a pack; else none. Planned once, while the DAG is built (the
    executor is known only then); onstart writes them down."""
    k = int(config["cluster"]["pack"])  # --config cluster='{pack: 2}' gives the text '2'
    if not ((workflow.non_local_exec or STACKED) and workflow.is_main_process and k > 1):
        return ()
    runs = [run for run in targeted_runs() if needs_training(run)]
    return tuple(map(tuple, packs(runs, k, by=(lambda run: run[0]) if STACKED else None)))


def pack_of(wc):
    """The index of the run's pack, else None (the run is its own job, if Snakemake reruns it)."""
    run = (wc.block, wc.init, int(wc.seed), wc.variant)
    return next((index for index, members in enumerate(planned_packs()) if run in members), None)


def write_pack_lists():
    """Each planned pack's runs, for its job: another process, which cannot plan them again (records change as runs
    finish). Called from onstart, so a dry run writes nothing."""
    for index, members in enumerate(planned_packs()):
        listed = Path(fill(PACK_RUNS, stamp=PACK_STAMP, index=index))
        listed.parent.mkdir(parents=True, exist_ok=True)
        listed.write_text(json.dumps([list(run) for run in members]) + "\n", encoding="utf-8")


def targeted_runs():
    """The runs this invocation's targets need, in the run sheet's order: those of the outputs they build, and the
    runs whose files they name; then the runs whose final.json they name that no output shows (yet: a cell that
    `seeds_by_initializer` leaves out until its runs exist)."""
    targets = {os.path.normpath(t) for t in workflow.dag_settings.targets or {"all"}}
    outputs = targeted_outputs(config, targets, RES)
    named = RUNS[[c for c in RUN_FILES if c != "run"]].map(os.path.normpath).isin(targets).any(axis=1)
    rows = RUNS[RUNS.output.isin(outputs) | named]
    runs = list(zip(rows.block, rows.initializer, rows.seed, rows.variant))
    for target in sorted(t for t in targets if t.endswith("final.json")):
        parts = os.path.relpath(target, RES).split(os.sep)  # block, init, seed<k>, variant, final.json
        if len(parts) == 5 and re.fullmatch(r"seed\d+", parts[2]):
            runs.append((parts[0], parts[1], int(parts[2][4:]), parts[3]))
    return list(dict.fromkeys(runs))


def needs_training(run):
    """Whether a run's record is missing or stale (what its plan says; Snakemake may rerun a run for more)."""
    record = run_file(FINAL, run)
    if not Path(record).is_file() or code_problem(record):
        return True
    return stale_reason(record, train_params(run_wildcards(run))) is not None


def code_problem(record):
    """Why a run's record is stale for its training code (embinit.records.code_stale_reason), or None."""
    return code_stale_reason(record, TRAINING_CODE, config["accepted_training_code"])


def run_wildcards(run):
    block, init, seed, variant = run
    return SimpleNamespace(block=block, init=init, seed=str(seed), variant=variant)


def run_file(template, run):
    return fill(template, **vars(run_wildcards(run)))


def pack_runs(wc):
    """The runs of a pack: as planned, in the main process that planned it; else as its onstart wrote them down."""
    if wc.stamp == PACK_STAMP and planned_packs():
        return list(planned_packs()[int(wc.index)])
    listed = Path(fill(PACK_RUNS, stamp=wc.stamp, index=wc.index))
    if not listed.is_file():
        raise WorkflowError(
            f"{listed}: the pack's run list is missing (the main process writes it at start; --no-hooks skips that)"
        )
    return [tuple(run) for run in json.loads(listed.read_text(encoding="utf-8"))]


def pack_inputs(wc):
    """Every input of the pack's runs."""
    inputs = [run_inputs(run_wildcards(run)) for run in pack_runs(wc)]
    return sorted({path for files in inputs for path in files.values()})


def train_resource(name):
    """Rule train's resource `name` for each of a pack's runs (--set-resources train:... included)."""
    resource = rules.train.rule.resources[name]

    def values(wc):
        runs = map(run_wildcards, pack_runs(wc))
        return [resource.evaluate(run).value if resource.is_evaluable() else resource.value for run in runs]

    return values


def vocab_check(task):
    """The input function of a task's vocab rule: its plan, dated now when a Parquet file it made is unreadable (cut,
    overwritten), so the job rebuilds them all. (An input function that raised would not stop the run: Snakemake
    takes a present file whose producer fails so as made, and goes on.)"""

    def check(wc):
        made = [VOCAB, TOKENIZED, REFERENCES]
        made = expand(made, task=task, tokenizer=wc.tokenizer, side=task_sides(config, task), split=task_splits(task))
        problems = [problem for problem in map(parquet_problem, made) if problem]
        return plan_check(fill(CHECK, stage="vocab", name=f"{task}/{wc.tokenizer}"), problems)

    return check


def output_files(out):
    """A figure's PNG and its data, a table's CSV (and Markdown, its other formats, a drawn table's PNG), or a folder;
    the first (a table's HTML in its place, and a drawn table's PNG) is in the HTML report."""
    caption = f"../report/{out.name}.rst"
    if out.folder:
        return {"folder": directory(fill(FOLDER, name=out.name))}
    shown = report(fill(FIGURE if out.figure else TABLE, name=out.name), caption, out.category)
    if out.figure:
        return {"png": shown, "csv": fill(TABLE, name=out.name)}
    files = {"csv": shown if "html" not in out.extra else fill(TABLE, name=out.name)}
    files.update({"md": fill(TABLE_MD, name=out.name)} if out.markdown else {})
    files.update({suffix: fill(TABLE_AS, name=out.name, suffix=suffix) for suffix in out.extra})
    if "html" in out.extra:
        files["html"] = report(files["html"], caption, out.category)
    return files | ({"png": report(fill(FIGURE, name=out.name), caption, out.category)} if out.drawn else {})


def output_inputs(out):
    """An output's input files: its runs' (the sheet's columns `out.files`), its layer files, and the raw files its
    config sections name; the paper comparison reads the tables built and the seeded ones' runs."""
    runs = sheet_of(out)
    inputs = {column: runs[column].tolist() for column in out.files}
    inputs["layers"] = LAYERS.path[LAYERS.output == out.name].tolist()
    inputs.update({role: raw(relpath) for role, relpath in out.raw_files(config).items()})
    if out.reads_tables:
        inputs["paper_tables"] = os.path.join(workflow.basedir, config["paper_comparison"]["paper_tables"])
        inputs["tables"] = [getattr(rules, n).output.csv for n in config["outputs"] if OUTPUTS[n].compared]
    return inputs


def output_plan(out):
    """The input function of `out`'s plan: stale when a record it reads (a run's final.json or metrics, a compared
    table) is missing or changed since `out` was built, so a lost run is rerun and the output rebuilt."""
    inputs = output_inputs(out)
    records = sorted({p for key in ("final", "metrics", "tables") for p in inputs.get(key, [])})
    first = str(next(iter(output_files(out).values())))
    return lambda wc: plan_aggregate(fill(OUTPUT_PLAN, name=out.name), first, records)


def sheet_of(out):
    """The run-sheet rows `out` reads (a boolean mask: DataFrame.query, lookup's, is slower)."""
    return RUNS[RUNS.output.isin(out.sheet_outputs(config))]


def sheet_rows(out):
    """The run-sheet rows `out`'s builder reads (params.rows); the paper comparison's keep their `output`."""
    rows = sheet_of(out).drop(columns=[] if out.every_run else EVERY_RUN_COLUMNS)
    return (rows if out.reads_tables else rows.drop(columns="output")).to_dict("records")
