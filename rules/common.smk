# What the rule files share: every artifact's path template (once), the run and layer sheets, and the path helpers.
# A rule file's own input functions sit above its rules. Names follow docs/design.md.
import os
import re

from embinit.cluster import job_resources
from embinit.config import sides_of, task_sides, tokenizer_of
from embinit.data.prepare import splits_of
from embinit.extensions import ExtensionFiles
from embinit.layers.initializers import INITIALIZERS
from embinit.outputs import OUTPUTS
from embinit.records import ResultsLock
from embinit.runsheet import layer_sheet, run_sheet

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


def block_path(template, block, **wildcards):
    """A data-stage path of a block: its task and tokenizer filled in."""
    return fill(template, task=task_of(block), tokenizer=tokenizer_of(config, block), **wildcards)


def vocabulary_targets(blocks):
    return sorted({block_path(VOCAB, b, side=side) for b in blocks for side in sides_of(config, b)})


def plan_path(wc, job):
    return fill(PLAN, block=wc.block, init=wc.init, seed=wc.seed, job=job)
