"""The run sheet: every training run the outputs use, one tidy row per (output, run), built once from the config.

The rules take each output's inputs from it and hand each report exactly its rows, so which runs a table shows is
decided by the output's selection (embinit.workflow.outputs) and only there; a report never re-filters by config. A row says
what its run is (block, task, sources, initializer with the registry entry and parameters its layer runs, seed,
variant and its switches, the recipe's included), how the paper's tables name it (`label`) and where its files are.
The layer sheet does the same for the embedding layers outputs read.
"""

from __future__ import annotations

import json

from pathlib import Path

import pandas as pd

from embinit.workflow.config import initializers_of, missing_setting, seeds_of, sides_of, tokenizer_of
from embinit.layers.initializers import INITIALIZERS, display_name, reads_pretrained
from embinit.layers.missing import source_names
from embinit.workflow.outputs import (
    OUTPUTS,
    generated_initializers,
    layer_recipe,
    speed_options,
    variant_settings,
    variants_of,
)

COLUMNS = [
    "output",
    "block",
    "task",
    "kind",
    "family",
    "sources",
    "source_display",
    "initializer",
    "initializer_entry",
    "initializer_params",
    "label",
    "seed",
    "variant",
    "pos_encoding",
    "embedding_trainable",
    "output_embedding",
    "model_init",
    "final_norm",
    "batching",
    "speed_options",
]


# The column of an `every_run` output's rows only: the config's outputs that show the run
EVERY_RUN_COLUMNS = ["shown_in"]
Run = tuple[str, str, int, str]  # block, initializer, seed, variant


def selections(config: dict) -> list[dict]:
    """Which runs each output that shows runs selects (embinit.workflow.outputs): its blocks, initializers (None: each
    block's own), variants and seeds (None: each block's; an int: the first that many; a dict: per block, as Figure 1's
    five-seed GloVe panel), and seeds per cell where a cell has more or fewer runs than the others (`cell_seeds`)."""
    return [{"output": name, **out.selects.runs(config)} for name, out in OUTPUTS.items() if out.selects.runs]


def block_sources(config: dict, block: str) -> tuple[str, str]:
    """('encoder=glove_de; decoder=glove', 'encoder=GloVe; decoder=GloVe'): the sources a block uses."""
    sides = config["blocks"][block]["sources"].items()
    names = "; ".join(f"{side}={src or 'none'}" for side, src in sides)
    displays = "; ".join(
        f"{side}={config['sources'][src]['display'] if src else 'none (Xavier)'}" for side, src in sides
    )
    return names, displays


def _seeds(config: dict, block: str, seeds) -> list[int]:
    if isinstance(seeds, dict):
        return list(range(seeds.get(block, len(seeds_of(config, block)))))
    return seeds_of(config, block)[:seeds]


def cell_seeds(selection: dict, init: str, variant: str):
    """How many seeds a selection takes of one cell: its initializer's `seeds_by_initializer` (a number, or one per
    variant), else its variant's `seeds_by_variant`, else `seeds` (None: the block's)."""
    by_variant = selection.get("seeds_by_variant", {}).get(variant, selection.get("seeds"))
    own = selection.get("seeds_by_initializer", {}).get(init, by_variant)
    return own.get(variant, by_variant) if isinstance(own, dict) else own


def describe(config: dict, block: str, init: str, seed: int, variant: str) -> dict:
    """A run's row without its output and files: what it is and how the paper's tables name it."""
    cfg, switches = config["blocks"][block], variants_of(config)[variant]
    model, train = variant_settings(config, switches, "model"), variant_settings(config, switches, "train")
    sources, display = block_sources(config, block)
    entry, params = layer_recipe(config, init)
    return {
        "block": block,
        "task": cfg["task"],
        "kind": config["tasks"][cfg["task"]]["kind"],
        "family": cfg["family"],
        "sources": sources,
        "source_display": display,
        "initializer": init,
        # the registry entry and parameters its layer runs (a named setting's, Table 12's scaled base)
        "initializer_entry": entry,
        "initializer_params": json.dumps(params, sort_keys=True),
        # a block with no source at all trains Xavier's layers under every initializer that reads one
        "label": display_name(init, cfg["family"], any(cfg["sources"].values()) or not reads_pretrained(entry)),
        "seed": seed,
        "variant": variant,
        "pos_encoding": switches["pos_encoding"],
        "embedding_trainable": switches["embedding_trainable"],
        "output_embedding": switches.get("output_embedding", "untied"),
        # the recipe's switches: the config's, or the variant's own (the recipe ablation's variants)
        "model_init": model["init"],
        "final_norm": model["final_norm"],
        "batching": train["batching"],
        "speed_options": ", ".join(speed_options(config, block, init, seed, variant)),  # e.g. "packed"; "" for none
    }


def _initializers(config: dict, block: str, wanted: list[str] | None) -> list[str]:
    """The block's initializers a selection wants (None: all of them), then the sweeps' it names (Table 12's)."""
    own = [i for i in initializers_of(config, block) if wanted is None or i in wanted]
    return own + [i for i in wanted or [] if i in generated_initializers(config)]


def run_sheet(config: dict, paths: dict[str, str], recorded: list[Run] = ()) -> pd.DataFrame:
    """One row per (output, run) of `selections`, in the config's order, with a column per `paths` template
    (name -> template with {block}, {init}, {seed}, {variant}: the run's files); then, for each `every_run` output,
    one row per run of the config's outputs and per run of `recorded` (`recorded_runs`) no output shows."""

    def row(output: str, block: str, init: str, seed: int, variant: str) -> dict:
        files = {name: t.format(block=block, init=init, seed=seed, variant=variant) for name, t in paths.items()}
        return {"output": output, **describe(config, block, init, seed, variant), **files}

    rows = [
        row(sel["output"], block, init, seed, variant)
        for sel in selections(config)
        for block in sel["blocks"]
        for init in _initializers(config, block, sel.get("initializers"))
        for variant in sel.get("variants", ["base"])
        for seed in _seeds(config, block, cell_seeds(sel, init, variant))
    ]
    shown_in: dict[Run, dict[str, None]] = {}
    for r in rows:
        if r["output"] in config["outputs"]:
            shown_in.setdefault((r["block"], r["initializer"], r["seed"], r["variant"]), {})[r["output"]] = None
    for run in recorded:
        shown_in.setdefault(run, {})
    for name in (name for name, out in OUTPUTS.items() if out.selects.every_run):
        rows += [row(name, *run) | {"shown_in": "; ".join(outputs)} for run, outputs in shown_in.items()]
    return pd.DataFrame(rows, columns=COLUMNS + list(paths) + EVERY_RUN_COLUMNS)


def recorded_runs(config: dict, results_dir: str | Path) -> list[Run]:
    """Every run record under `results_dir` (a final.json with its metrics.parquet) whose block, initializer and
    variant the config knows: a run no configured output shows keeps its row in the run table."""
    inits = {*INITIALIZERS, *config["initializer_params"], *generated_initializers(config)}
    variants = variants_of(config)
    runs = []
    for final in sorted(Path(results_dir).glob("*/*/seed*/*/final.json")):
        block, init, seed, variant = final.parts[-5:-1]
        seed = seed.removeprefix("seed")
        known = block in config["blocks"] and init in inits and variant in variants and seed.isdigit()
        if known and final.with_name("metrics.parquet").is_file():
            runs.append((block, init, int(seed), variant))
    return runs


def trained_blocks(config: dict) -> list[str]:
    """Blocks whose models train: those of every output's selection, in order (Tables 3, 9-11 and the figures train
    their own runs, in run_blocks or not)."""
    return list(dict.fromkeys(block for sel in selections(config) for block in sel["blocks"]))


LAYER_COLUMNS = ["output", "block", "task", "family", "source", "source_display", "side", "file", "initializer", "seed"]


def layer_sheet(config: dict, runs: pd.DataFrame, paths: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per (output, file) of the outputs that read embedding layers (embinit.workflow.outputs.Layer); `runs` is the
    run sheet (an output's layers may follow its runs), `paths` a template per kind of file (layer: with {block},
    {init}, {seed}, {side}; pretrained, tokens: with {block}, {side}; vocab: with {task}, {tokenizer}, {side};
    tokenizer: {relpath}, the tokenizer's raw file; None: rows without paths, for what reads only the layers' kinds)."""
    rows = []
    for name, out in OUTPUTS.items():
        selected = out.selects.layers(config, runs[runs.output == name]) if out.selects.layers else ()
        for block, side, file, init, seed in selected:
            cfg, source = config["blocks"][block], config["blocks"][block]["sources"][side]
            tokenizer = tokenizer_of(config, block)
            relpath = config["sources"][tokenizer]["files"]["tokenizer"] if tokenizer != "spacy" else None
            fields = {"block": block, "side": side, "init": init, "seed": seed, "task": cfg["task"]}
            rows.append(
                {
                    "output": name,
                    "block": block,
                    "task": cfg["task"],
                    "family": cfg["family"],
                    "source": source,
                    "source_display": config["sources"][source]["display"] if source else None,
                    "side": side,
                    "file": file,
                    "initializer": init,
                    "seed": seed,
                    "path": paths[file].format(**fields, tokenizer=tokenizer, relpath=relpath) if paths else None,
                }
            )
    return pd.DataFrame(rows, columns=LAYER_COLUMNS + ["path"])


def plotted(runs: pd.DataFrame) -> set[tuple[str, str, str]]:
    """(block, initializer, variant) of the runs, any seed, of an output that plots validation BLEU per epoch
    (Figure 1): under `train.valid_bleu: auto` only these decode the validation split every epoch."""
    shown = runs[runs.output.isin([name for name, out in OUTPUTS.items() if out.role.valid_bleu])]
    return set(shown[["block", "initializer", "variant"]].itertuples(index=False, name=None))


def fetched_raw(config: dict, runs: pd.DataFrame, layers: pd.DataFrame) -> list[str]:
    """The raw files (remotes' relpaths) the jobs of config `outputs` fetch, as the rules' inputs reach them: each
    block's task data (and sub-word tokenizer) for its runs and layers, a side's source files where a layer reads
    its pre-trained matrix (and then those of the other sources the missing-row policy reads, e.g. `focus`'s
    auxiliary space), and the files the outputs' config sections name. What prefetch and preflight cover."""
    built = config["outputs"]
    runs, layers = runs[runs.output.isin(built)], layers[layers.output.isin(built)]
    sourced = {  # (block, side) whose pre-trained matrix some layer reads
        (block, side)
        for block, init in set(runs[["block", "initializer"]].itertuples(index=False, name=None))
        for side in sides_of(config, block)
        if reads_pretrained(layer_recipe(config, init)[0])
    } | {
        (r.block, r.side)
        for r in layers.itertuples()
        if r.file != "layer" or reads_pretrained(layer_recipe(config, r.initializer)[0])
    }
    files = set()
    for block in {*runs.block, *layers.block}:
        files.update(_task_files(config, config["blocks"][block]["task"]))
        if tokenizer_of(config, block) != "spacy":
            files.add(config["sources"][tokenizer_of(config, block)]["files"]["tokenizer"])
    extracted = {source for block, side in sourced if (source := config["blocks"][block]["sources"][side])}
    if extracted:
        extracted.update(source_names(*missing_setting(config)))
    for source in extracted:
        files.update(config["sources"][source]["files"].values())
    files.update(path for name in built for path in OUTPUTS[name].raw_files(config).values())
    return sorted(files)


def _task_files(config: dict, task: str) -> list[str]:
    """A task's raw files; a role may name a list."""
    roles = config["tasks"][task].get("files", {}).values()  # a hf_dataset task: none
    return [f for files in roles for f in ([files] if isinstance(files, str) else files)]
