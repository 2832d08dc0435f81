# Shared names: every artifact's path template (once), the wildcards' allowed values, and the input functions
# the rule files call. Rule files hold rules only. Names follow docs/design.md.
import json
import os
import re

from embinit.config import dim_of, initializers_of, lr_of, seeds_of, sides_of, tokenizer_of, valid_bleu_of
from embinit.data.fetch import FetchSettings
from embinit.data.prepare import splits_of
from embinit.data.vocab import SPLIT_LAYOUT
from embinit.extensions import fingerprint as extensions_fingerprint
from embinit.layers.initializers import INITIALIZERS, fingerprint, reads_pretrained
from embinit.training import Placement

# Jobs import the embinit package of this checkout, also inside --sdm conda environments and on cluster nodes
# (a documented exception to snakemake --lint's envvars finding: docs/design.md "Lint").
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")]))

PIPELINE_ENV = "../envs/pipeline.yaml"
DATA = config["data_dir"]
RES = config["results_dir"]
EXTENSIONS = config["extensions"]  # loaded by embinit.config.check; jobs load them again (params.extensions)
EXTENSIONS_FINGERPRINT = extensions_fingerprint(EXTENSIONS)  # their content: a change reruns what uses them

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
# Reports stage: an output named in config `outputs` is {RES}/<name>.csv (+ .md), or .png for figures.
TABLE = f"{RES}/{{name}}.csv"
TABLE_MD = f"{RES}/{{name}}.md"
FIGURE = f"{RES}/{{name}}.png"
REPORTS_LOG = f"{RES}/logs/{{name}}.log"
FIGURES = ("figure1", "figure2")


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
        paths.update(config["tasks"][task_of(block)]["files"].values())
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


def train_inputs(wc):
    task = task_of(wc.block)
    inputs = {split: block_path(TOKENIZED, wc.block, split=split) for split in task_splits(task)}
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
        "train": {k: v for k, v in config["train"].items() if k not in ("device", "num_threads")},
        "variant": config["variants"][wc.variant],
        "epochs": block["epochs"],
        "batch_size": block["batch_size"],
        "lr": lr_of(config, wc.block),
        "seed": int(wc.seed),
        "valid_bleu": valid_bleu_of(config, wc.block, wc.init, wc.variant),
        "num_classes": task.get("num_classes"),
        "tokenizer": tokenizer_of(config, wc.block),
        "languages": task["languages"],
        "extensions": EXTENSIONS_FINGERPRINT,
        "run": {
            "block": wc.block,
            "task": task_of(wc.block),
            "initializer": wc.init,
            "seed": int(wc.seed),
            "variant": wc.variant,
        },
    }


def run_file(template, block, init, seed, variant):
    return fill(template, block=block, init=init, seed=seed, variant=variant)


def base_runs(blocks, initializers=None, variant="base", seeds=None, template=FINAL):
    """final.json (or `template`) of every seed of every (block, initializer) for one variant; `seeds` maps a
    block to another number of seeds than its own (Figure 1 averages five seeds of Multi30k GloVe)."""
    seeds = seeds or {}
    return [
        run_file(template, b, i, s, variant)
        for b in blocks
        for i in initializers_of(config, b)
        if initializers is None or i in initializers
        for s in range(seeds.get(b, len(seeds_of(config, b))))
    ]


def blocks_running(initializer):
    """The run_blocks that train `initializer` (the paper ran Xavier_Pretrained only on BERT and T5)."""
    return [b for b in config["run_blocks"] if initializer in initializers_of(config, b)]


# --- reports ---


def output_path(name):
    """The file that stands for an entry of config `outputs`."""
    return fill(FIGURE if name in FIGURES else TABLE, name=name)


def report_config(*sections):
    """The config sections a report script reads: the names every report uses, and `sections` (e.g. "table3");
    a change in them rebuilds the report."""
    keys = ("blocks", "sources", "initializers", "variants", "tasks", "model", *sections)
    return {k: config[k] for k in keys}


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
RESULT_TABLES = {
    1: lambda: base_runs(config["run_blocks"]),
    7: lambda: base_runs(blocks_running("Xavier_Pretrained"), ["Xavier", "Xavier_Pretrained"]),
    5: lambda: base_runs(config["run_blocks"]),
}


def table3_runs():
    t3 = config["table3"]
    return [
        run_file(FINAL, t3["block"], i, s, v)
        for i in t3["initializers"]
        for v in t3["variants"]
        for s in seeds_of(config, t3["block"])[: t3.get("seeds")]
    ]


def table6_layers():
    t6 = config["table6"]
    return {
        init: fill(EMBEDDING, block=t6["block"], init=init, seed=0, side=t6["side"])
        for init in ("Xavier", "Pretrained", "Pretrained_Xavier")
    }


def figure1_runs(template):
    f1 = config["figure1"]
    return base_runs(f1["blocks"], f1["initializers"], seeds=f1.get("seeds", {}), template=template)


def crossed_runs(key):
    """final.json of config `key` (table9, table11): its blocks x initializers x variants, every seed."""
    spec = config[key]
    return [
        run for variant in spec["variants"] for run in base_runs(spec["blocks"], spec["initializers"], variant=variant)
    ]


def figure2_runs(template):
    return base_runs(config["figure2"]["blocks"], config["figure2"]["initializers"], template=template)


def table10_runs(template):
    """Table 10's runs (FINAL, TRAINED) or their starting layers (EMBEDDING), in one order."""
    t10 = config["table10"]
    return base_runs([t10["block"]], t10["initializers"], template=fill(template, side=t10["side"]))


def table4_layer(template):
    """Table 4's pre-trained layer (PRETRAINED) or its row tokens (PRETRAINED_TOKENS)."""
    return fill(template, block=config["table4"]["block"], side=config["table4"]["side"])


PAPER_TABLES = os.path.join(
    workflow.basedir, config.get("paper_comparison", {}).get("paper_tables", "resources/paper_tables.md")
)
