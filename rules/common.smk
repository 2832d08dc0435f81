# Shared names: every artifact's path template (once), the run and layer sheets, and the input functions the rule
# files call. Rule files hold rules only. Names follow docs/design.md.
import os
import re

from embinit.cluster import check as check_cluster, job_resources
from embinit.config import sides_of, task_sides, tokenizer_of
from embinit.data.prepare import splits_of
from embinit.extensions import ExtensionFiles
from embinit.layers.initializers import INITIALIZERS, reads_pretrained
from embinit.outputs import OUTPUTS
from embinit.records import ResultsLock, plan, sidecar_of
from embinit.runsheet import layer_sheet, plotted, run_sheet
from embinit.specs import layer_spec, train_spec

PIPELINE_ENV = "../envs/pipeline.yaml"
# profiles/slurm: the site's account and partition (config `cluster`) for every job that does not train
CPU_JOB = job_resources(config["cluster"], gpu=False)
DATA = config["data_dir"]
RES = config["results_dir"]
RESULTS_LOCK = ResultsLock(RES)
# Jobs load the extension files again; what a job uses of them is in its params (embinit.specs)
EXTENSIONS = ExtensionFiles(tuple(config["extensions"]))

# Artifact paths; {braces} are wildcards. Data stage (under data_dir):
RAW = f"{DATA}/raw/{{relpath}}"
PREPARED = f"{DATA}/prepared/{{task}}/{{split}}.parquet"
VOCAB = f"{DATA}/vocab/{{task}}/{{tokenizer}}/{{side}}.parquet"
TOKENIZED = f"{DATA}/tokenized/{{task}}/{{tokenizer}}/{{split}}.parquet"
DETOKENIZER = f"{DATA}/vocab/{{task}}/{{tokenizer}}/detokenizer.json"  # decoder ids -> tokens and text (BLEU)
REFERENCES = f"{DATA}/references/{{task}}/{{tokenizer}}/{{split}}.parquet"  # BLEU references of a split
DATA_LOG = f"{DATA}/logs/{{stage}}/{{name}}.log"
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
TRAIN_LOG = f"{RUN}/train.log"
# What the config plans for a layer or a run (embinit.records.plan: a stale output reruns its job), each file alone
# in its own directory, made when the file is: Snakemake takes a file missing that appears in a directory it has
# already listed while building the DAG
PLAN = f"{RES}/.plans/{{block}}/{{init}}/seed{{seed}}/{{job}}/plan.json"
# Reports stage: an output of config `outputs` (embinit/outputs.py) is {RES}/<name>.csv (+ .md), or .png (+ .csv).
TABLE = f"{RES}/{{name}}.csv"
TABLE_MD = f"{RES}/{{name}}.md"
FIGURE = f"{RES}/{{name}}.png"
REPORTS_LOG = f"{RES}/logs/{{name}}.log"

# The run sheet (embinit.runsheet): one row per (output, run) it shows; the layer sheet: one per (output, layer file)
RUNS = run_sheet(config, {"final": FINAL, "metrics": METRICS, "trained": TRAINED, "run": RUN})
LAYERS = layer_sheet(config, RUNS, {"layer": EMBEDDING, "pretrained": PRETRAINED, "tokens": PRETRAINED_TOKENS})
PLOTTED = plotted(RUNS)


def fill(template, **wildcards):
    """`template` with the given wildcards filled in; the others stay wildcards."""
    return expand(template, **wildcards, allow_missing=True)[0]


def _choice(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    block=_choice(config["blocks"]),
    side="encoder|decoder",
    seed=r"\d+",
    variant=_choice(config["variants"]),
    init=_choice(INITIALIZERS),


def raw(relpath):
    return fill(RAW, relpath=relpath)


def task_of(block):
    return config["blocks"][block]["task"]


def source_of(block, side):
    return config["blocks"][block]["sources"][side]


def task_splits(task):
    return splits_of(config["tasks"][task]["format"])


def evaluated_splits(task):
    """The splits a translation task scores BLEU on (its references); none for classification."""
    return ["valid", "test"] if config["tasks"][task]["kind"] == "translation" else []


def tokenizer_input(wc):
    """The raw tokenizer file a sub-word vocabulary reads (none for spaCy)."""
    return [] if wc.tokenizer == "spacy" else raw(config["sources"][wc.tokenizer]["files"]["tokenizer"])


def block_path(template, block, **wildcards):
    """A data-stage path of a block: its task and tokenizer filled in."""
    return fill(template, task=task_of(block), tokenizer=tokenizer_of(config, block), **wildcards)


def vocabulary_targets(blocks):
    return sorted({block_path(VOCAB, b, side=side) for b in blocks for side in sides_of(config, b)})


def raw_inputs(blocks):
    """Every raw file the blocks need: their tasks' data and their sources' files."""
    paths = set()
    for block in blocks:
        for files in config["tasks"][task_of(block)]["files"].values():
            paths.update([files] if isinstance(files, str) else files)  # a role may name a list
        for source in config["blocks"][block]["sources"].values():
            if source is not None:
                paths.update(config["sources"][source]["files"].values())
    return sorted(raw(p) for p in paths)


def source_files(wc):
    """The raw files of the block side's pre-trained source, by role (vectors, index, weights, tokenizer)."""
    return {role: raw(p) for role, p in config["sources"][source_of(wc.block, wc.side)]["files"].items()}


def plan_path(wc, job):
    return fill(PLAN, block=wc.block, init=wc.init, seed=wc.seed, job=job)


def layer_params(wc):
    return layer_spec(config, wc.block, wc.init, int(wc.seed), wc.side)


def layer_inputs(wc):
    layer = fill(EMBEDDING, block=wc.block, init=wc.init, seed=wc.seed, side=wc.side)
    pretrained = source_of(wc.block, wc.side) and reads_pretrained(wc.init)  # Xavier reads only N and D
    return {
        "vocab": block_path(VOCAB, wc.block, side=wc.side),
        "pretrained": fill(PRETRAINED, block=wc.block, side=wc.side) if pretrained else [],
        "plan": plan(plan_path(wc, f"layer_{wc.side}"), sidecar_of(layer), layer_params(wc)),
    }


def train_params(wc):
    plotted = (wc.block, wc.init, wc.variant) in PLOTTED
    return train_spec(config, wc.block, wc.init, int(wc.seed), wc.variant, plotted)


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


def check_cluster_settings():
    """profiles/slurm: settings sbatch would refuse or leave PENDING forever fail before any submission."""
    if not workflow.non_local_exec:
        return
    k = workflow.group_settings.group_components.get("train", 1)
    train = rules.train.rule.resources
    jobs = {
        f"train x{k} (group-components train={k})": {
            "cpus": k * train["_cores"].value,
            "mem_mb": k * train["mem_mb"].value,
            **job_resources(config["cluster"], gpu=True),
        },
        "of every other job": CPU_JOB,
    }
    check_cluster(config["cluster"], jobs)


def output_files(out):
    """An output's files: a figure's PNG and its data, a table's CSV and Markdown; the first is in the HTML report."""
    first = report(
        fill(FIGURE if out.figure else TABLE, name=out.name), caption=f"../report/{out.name}.rst", category=out.category
    )
    rest = (
        {"csv": fill(TABLE, name=out.name)}
        if out.figure
        else {"md": fill(TABLE_MD, name=out.name)} if out.markdown else {}
    )
    return {"png" if out.figure else "csv": first, **rest}


def output_inputs(out):
    """An output's input files: its runs' (the sheet's columns `out.files`), its layer files, and what its config
    sections name (word-analogy questions); the paper comparison reads the tables built and the seeded ones' runs."""
    runs = sheet_rows(out)
    inputs = {column: runs[column].tolist() for column in out.files} if len(runs) else {}
    inputs["layers"] = LAYERS.path[LAYERS.output == out.name].tolist()
    inputs.update({"questions": raw(config[s]["questions"]) for s in out.sections if "questions" in config[s]})
    if out.reads_tables:
        inputs["paper_tables"] = PAPER_TABLES
        inputs["tables"] = [getattr(rules, n).output.csv for n in config["outputs"] if OUTPUTS[n].compared]
    return inputs


def sheet_rows(out):
    """The run sheet's rows an output shows, or for the paper comparison the runs of the seeded tables built."""
    if out.reads_tables:
        return RUNS[RUNS.output.isin([n for n in config["outputs"] if OUTPUTS[n].seeded])]
    return RUNS[RUNS.output == out.name].drop(columns="output")


def report_config(out):
    """The config sections an output's builder reads, with model and the sources of the blocks they name, so a
    change there rebuilds it and an initializer or block added elsewhere does not."""
    if not out.sections:
        return {}
    blocks = {config[s]["block"] for s in out.sections}
    sources = {src for b in blocks for src in config["blocks"][b]["sources"].values() if src}
    return {
        **{s: config[s] for s in out.sections},
        "model": config["model"],
        "blocks": {b: {"sources": config["blocks"][b]["sources"]} for b in sorted(blocks)},
        "sources": {src: config["sources"][src] for src in sorted(sources)},
    }


PAPER_TABLES = os.path.join(
    workflow.basedir, config.get("paper_comparison", {}).get("paper_tables", "resources/paper_tables.csv")
)
