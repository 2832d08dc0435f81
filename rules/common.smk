# Shared names: every artifact's path template (once), the wildcards' allowed values, and the input functions
# the rule files call. Rule files hold rules only. Names follow docs/design.md.
import json
import os
import re

from embinit.cluster import check as check_cluster, job_resources
from embinit.config import dim_of, initializers_of, lr_of, seeds_of, sides_of, tokenizer_of, valid_bleu_of
from embinit.data.fetch import FetchSettings
from embinit.data.prepare import splits_of
from embinit.data.vocab import SPLIT_LAYOUT
from embinit.extensions import ExtensionFiles, code_fingerprint
from embinit.layers.initializers import INITIALIZERS, fingerprint, reads_pretrained
from embinit.layers.pretrained import MISSING_POLICIES
from embinit.models.position import POSITION_ENCODINGS
from embinit.records import ResultsLock, plan, sidecar_of
from embinit.runsheet import run_sheet
from embinit.training import Placement

# Jobs import the embinit package of this checkout, also inside --sdm conda environments and on cluster nodes
# (a documented exception to snakemake --lint's envvars finding: docs/design.md "Lint").
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")]))

PIPELINE_ENV = "../envs/pipeline.yaml"
# profiles/slurm: the site's account and partition (config `cluster`) for every job that does not train
CPU_JOB = job_resources(config["cluster"], gpu=False)
DATA = config["data_dir"]
RES = config["results_dir"]
# Loaded by embinit.config.check; jobs load them again. A job's rerun trigger holds the code of the registry entry it
# uses (code_fingerprint), never the files themselves: adding or editing a file reruns only what uses what changed.
EXTENSIONS = ExtensionFiles(tuple(config["extensions"]))
MISSING_CODE = code_fingerprint(MISSING_POLICIES[config["embeddings"]["missing"]])

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
# Reports stage: an output named in config `outputs` is {RES}/<name>.csv (+ .md), or .png for figures.
TABLE = f"{RES}/{{name}}.csv"
TABLE_MD = f"{RES}/{{name}}.md"
FIGURE = f"{RES}/{{name}}.png"
REPORTS_LOG = f"{RES}/logs/{{name}}.log"
FIGURES = ("figure1", "figure2")
REPORT_CATEGORY = {
    "figure1": "Figure 1",
    **dict.fromkeys(("table9", "table10", "table11", "figure2"), "Beyond the paper"),
}
REPORT_CATEGORY.update(dict.fromkeys(("table1", "table3", "table5", "table7"), "Tables"))


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


# --- data ---


def raw(relpath):
    return fill(RAW, relpath=relpath)


def task_of(block):
    return config["blocks"][block]["task"]


def source_of(block, side):
    return config["blocks"][block]["sources"][side]


def task_splits(task):
    return splits_of(config["tasks"][task]["format"])


def task_sides(task):
    return ["encoder", "decoder"] if config["tasks"][task]["kind"] == "translation" else ["encoder"]


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


# --- layers ---


def source_files(wc):
    """The raw files of the block side's pre-trained source, by role (vectors, index, weights, tokenizer)."""
    return {role: raw(p) for role, p in config["sources"][source_of(wc.block, wc.side)]["files"].items()}


def pretrained_input(wc):
    """The pre-trained matrix an initializer reads; none for Xavier or a side without a source."""
    if source_of(wc.block, wc.side) and reads_pretrained(wc.init):
        return fill(PRETRAINED, block=wc.block, side=wc.side)
    return []


def match_entries(blocks):
    return [
        {"block": b, "side": side, "source": source, "meta": fill(PRETRAINED_TOKENS, block=b, side=side)}
        for b in blocks
        for side, source in config["blocks"][b]["sources"].items()
        if source is not None
    ]


# --- training ---


def plan_path(wc, job):
    return fill(PLAN, block=wc.block, init=wc.init, seed=wc.seed, job=job)


def layer_spec(wc):
    """Everything a layer depends on but its input files (a change rebuilds it): `fingerprint` holds the
    initializer's params and code."""
    params = config["initializer_params"].get(wc.init, {})
    return {
        "initializer": wc.init,
        "params": params,
        "fingerprint": fingerprint(wc.init, params),
        "seed": int(wc.seed),
        "dim": dim_of(config, wc.block),
        "side": wc.side,
    }


def layer_inputs(wc):
    layer = fill(EMBEDDING, block=wc.block, init=wc.init, seed=wc.seed, side=wc.side)
    return {
        "vocab": block_path(VOCAB, wc.block, side=wc.side),
        "pretrained": pretrained_input(wc),
        "plan": plan(plan_path(wc, f"layer_{wc.side}"), sidecar_of(layer), layer_spec(wc)),
    }


def train_inputs(wc):
    task = task_of(wc.block)
    inputs = {split: block_path(TOKENIZED, wc.block, split=split) for split in task_splits(task)}
    record = fill(FINAL, block=wc.block, init=wc.init, seed=wc.seed, variant=wc.variant)
    inputs["plan"] = plan(plan_path(wc, f"run_{wc.variant}"), record, train_spec(wc))
    for side in sides_of(config, wc.block):
        inputs[f"emb_{side}"] = fill(EMBEDDING, block=wc.block, init=wc.init, seed=wc.seed, side=side)
    if evaluated_splits(task):
        inputs["detokenizer"] = block_path(DETOKENIZER, wc.block)
        for split in evaluated_splits(task):
            inputs[f"references_{split}"] = block_path(REFERENCES, wc.block, split=split)
    return inputs


def train_spec(wc):
    """Everything a run depends on (a change reruns it), except where it runs (params.placement)."""
    block, task = config["blocks"][wc.block], config["tasks"][task_of(wc.block)]
    return {
        "kind": task["kind"],
        "model": config["model"],
        "train": {k: v for k, v in config["train"].items() if k not in Placement.CONFIG_KEYS},
        "variant": config["variants"][wc.variant],
        "epochs": block["epochs"],
        "batch_size": block["batch_size"],
        "lr": lr_of(config, wc.block),
        "seed": int(wc.seed),
        "valid_bleu": valid_bleu_of(config, wc.block, wc.init, wc.variant),
        "num_classes": task.get("num_classes"),
        "tokenizer": tokenizer_of(config, wc.block),
        "languages": task["languages"],
        "position_code": code_fingerprint(POSITION_ENCODINGS[config["variants"][wc.variant]["pos_encoding"]]),
        "run": {
            "block": wc.block,
            "task": task_of(wc.block),
            "initializer": wc.init,
            "seed": int(wc.seed),
            "variant": wc.variant,
        },
    }


def check_cluster_settings():
    """profiles/slurm: settings sbatch would refuse or leave PENDING forever fail before any submission."""
    if not workflow.non_local_exec:
        return
    k = workflow.group_settings.group_components.get("train", 1)
    train = rules.train.rule.resources
    check_cluster(
        config["cluster"],
        {
            f"train x{k} (group-components train={k})": {
                "cpus": k * train["_cores"].value,
                "mem_mb": k * train["mem_mb"].value,
                **job_resources(config["cluster"], gpu=True),
            },
            "of every other job": CPU_JOB,
        },
    )


# --- reports ---


def output_path(name):
    """The file that stands for an entry of config `outputs`."""
    return fill(FIGURE if name in FIGURES else TABLE, name=name)


def report_config(*sections):
    """The config an analogy report reads: `sections` (e.g. "table4"), model, and the sources of the blocks the
    sections name, so a change there rebuilds it and an initializer or block added elsewhere does not."""
    blocks = {config[s]["block"] for s in sections}
    sources = {src for b in blocks for src in config["blocks"][b]["sources"].values() if src}
    return {
        **{s: config[s] for s in sections},
        "model": config["model"],
        "blocks": {b: {"sources": config["blocks"][b]["sources"]} for b in sorted(blocks)},
        "sources": {src: config["sources"][src] for src in sorted(sources)},
    }


def stats_entries(blocks, initializers):
    """Seed 0's encoder layer of each (block, initializer) pair, as embinit.reports.statistics expects.

    A block whose encoder has no source (multi30k_glove6b50d offline) reports its decoder layer instead; a block
    with no source at all (a Xavier-only block) has no pre-trained layer to describe and is left out.
    """
    entries = []
    for block in blocks:
        sourced = [(k, s) for k, s in config["blocks"][block]["sources"].items() if s is not None]
        if not sourced:
            continue
        side, source = sourced[0]
        for init in initializers_of(config, block):
            if init in initializers:
                entries.append(
                    {
                        "block": block,
                        "task": task_of(block),
                        "family": config["blocks"][block]["family"],
                        "source": source,
                        "side": side,
                        "initializer": init,
                        "path": fill(EMBEDDING, block=block, init=init, seed=0, side=side),
                    }
                )
    return entries


# Table 2 leaves out _Shuffled: "identical distribution to Pre-trained" (the paper omits those rows).
STATS_TABLES = {
    2: [i for i in INITIALIZERS if i not in ("Xavier_Pretrained", "Pretrained_Shuffled")],
    8: ["Xavier_Pretrained"],
}
# The run sheet (embinit.runsheet): every run an output shows, one row per (output, run). Report rules take their
# inputs from it and pass their rows on (params.runs), so each report gets exactly the runs it shows.
RESULTS_LOCK = ResultsLock(RES)
RUNS = run_sheet(config, {"final": FINAL, "metrics": METRICS, "trained": TRAINED, "run": RUN})


def runs_of(output, column="final"):
    """The files (a column of the sheet: final, metrics, trained) of the runs `output` shows, in sheet order."""
    return list(RUNS[column][RUNS.output == output])


def table10_runs():
    """Table 10's sheet rows, each with the layer it started from (`initial`, config table10's side)."""
    side = config["table10"]["side"]
    return [
        {**r, "initial": fill(EMBEDDING, block=r["block"], init=r["initializer"], seed=r["seed"], side=side)}
        for r in sheet_rows("table10")
    ]


def sheet_rows(output):
    """The sheet's rows of `output` as records: a report's params.runs."""
    return RUNS[RUNS.output == output].drop(columns="output").to_dict("records")


def table6_layers():
    t6 = config["table6"]
    return {
        init: fill(EMBEDDING, block=t6["block"], init=init, seed=0, side=t6["side"])
        for init in ("Xavier", "Pretrained", "Pretrained_Xavier")
    }


def table4_layer(template):
    """Table 4's pre-trained layer (PRETRAINED) or its row tokens (PRETRAINED_TOKENS)."""
    return fill(template, block=config["table4"]["block"], side=config["table4"]["side"])


PAPER_TABLES = os.path.join(
    workflow.basedir, config.get("paper_comparison", {}).get("paper_tables", "resources/paper_tables.csv")
)


def comparison_runs():
    """The sheet's rows (with `output`) of the result tables paper_comparison judges the findings on: Tables 1, 3
    and 7, where config `outputs` builds them."""
    shown = [t for t in ("table1", "table3", "table7") if t in config["outputs"]]
    return RUNS[RUNS.output.isin(shown)].to_dict("records")
