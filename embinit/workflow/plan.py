"""What one configuration plans, built once when the Snakefile is read: the run and layer sheets, and each job's
inputs and spec as lookups over them (rules/common.smk hands them to the rules)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd
from snakemake.io import directory, report

from embinit.workflow.config import evaluated_splits, missing_setting, sides_of, task_sides, tokenizer_of
from embinit.data.hf_dataset import is_saved, saved_files
from embinit.data.prepare import splits_of
from embinit.layers.initializers import LayerSpec, reads_pretrained
from embinit.layers.missing import source_names
from embinit.workflow.outputs import OUTPUTS, Output, layer_recipe
from embinit.workflow.runsheet import EVERY_RUN_COLUMNS, layer_sheet, plotted, recorded_runs, run_sheet
from embinit.workflow.specs import layer_spec, train_spec
from embinit.training.spec import RunSpec
from embinit.workflow.paths import Paths, fill


class RunKey(NamedTuple):
    """A run: the wildcards of its directory (equal to the sheets' (block, initializer, seed, variant) tuples)."""

    block: str
    init: str
    seed: int
    variant: str

    @classmethod
    def of(cls, wc) -> RunKey:
        return cls(wc.block, wc.init, int(wc.seed), wc.variant)

    def fill(self, template: str) -> str:
        """A run template (one of Paths' run files) with every wildcard filled."""
        return template.format(**self._asdict())


class LayerKey(NamedTuple):
    """An embedding layer a run starts from (or an output reads)."""

    block: str
    init: str
    seed: int
    side: str

    @classmethod
    def of(cls, wc) -> LayerKey:
        return cls(wc.block, wc.init, int(wc.seed), wc.side)


@dataclass(frozen=True, eq=False)
class Plan:
    """A configuration's sheets and paths: `runs` has a row per (output, run), `layers` per (output, layer file);
    `drawn` holds the (block, initializer, variant) of the runs a figure draws validation BLEU of."""

    config: dict
    paths: Paths
    runs: pd.DataFrame
    layers: pd.DataFrame
    drawn: frozenset[tuple[str, str, str]]
    _inputs: dict[str, dict] = field(default_factory=dict, repr=False)  # output_inputs', each computed once

    @classmethod
    def of(cls, config: dict) -> Plan:
        paths = Paths.of(config["data_dir"], config["results_dir"])
        runs = run_sheet(config, paths.run_files, recorded_runs(config, config["results_dir"]))
        return cls(config, paths, runs, layer_sheet(config, runs, paths.layer_files), frozenset(plotted(runs)))

    # Data stage
    def raw(self, relpath: str) -> str:
        return fill(self.paths.raw, relpath=relpath)

    def task_of(self, block: str) -> str:
        return self.config["blocks"][block]["task"]

    def source_of(self, block: str, side: str) -> str | None:
        return self.config["blocks"][block]["sources"][side]

    def task_splits(self, task: str) -> list[str]:
        return splits_of(self.config["tasks"][task])

    def block_path(self, template: str, block: str, **wildcards) -> str:
        """A data-stage path of a block: its task and tokenizer filled in."""
        return fill(template, task=self.task_of(block), tokenizer=tokenizer_of(self.config, block), **wildcards)

    def dataset_folder(self, task: str) -> dict[str, list[str]]:
        """The files of the `save_to_disk` folder a hf_dataset task reads, as its input, so a dataset saved anew
        reruns it (a folder's own time changes only when an entry is added or removed); none for a hub id."""
        dataset = self.config["tasks"][task].get("dataset")
        return {"dataset": saved_files(dataset["path"])} if dataset and is_saved(dataset["path"]) else {}

    def prepare_params(self, task: str) -> dict:
        """What a task's prepare job reads beyond its format and files, as plain values so a changed one reruns it: a
        hf_dataset task's fields and splits, a file format's reading options (config `tasks.<task>`)."""
        entry = self.config["tasks"][task]
        if entry["format"] == "hf_dataset":
            return {
                "task": task,
                "kind": entry["kind"],
                "num_classes": entry.get("num_classes"),
                "dataset": entry["dataset"],
            }
        sample = {"train_rows": entry["train_rows"]} if "train_rows" in entry else {}  # absent: all, as before
        return {"drop_empty": entry["drop_empty"], "unescape_entities": entry.get("unescape_entities", False), **sample}

    def tokenizer_input(self, tokenizer: str) -> list[str] | str:
        """The raw tokenizer file a sub-word vocabulary reads (none for spaCy)."""
        return [] if tokenizer == "spacy" else self.raw(self.config["sources"][tokenizer]["files"]["tokenizer"])

    def vocab_outputs(self, task: str, tokenizer: str) -> list[str]:
        """What a task's vocab job makes for a tokenizer: vocabularies, tokenized splits, BLEU's references."""
        fields = {"task": task, "tokenizer": tokenizer}
        made = [fill(self.paths.vocab, side=side, **fields) for side in task_sides(self.config, task)]
        made += [fill(self.paths.tokenized, split=split, **fields) for split in self.task_splits(task)]
        evaluated = evaluated_splits(self.config, task)
        return made + [fill(self.paths.references, split=split, **fields) for split in evaluated]

    # Layers stage
    def auxiliary_sources(self) -> dict[str, dict]:
        """The other sources the missing-row policy reads (`focus`'s auxiliary space), by name: its config entry and
        its raw files by role; none for the built-in default."""
        sources = self.config["sources"]
        return {
            name: {"source": sources[name], "files": {r: self.raw(p) for r, p in sources[name]["files"].items()}}
            for name in source_names(*missing_setting(self.config))
        }

    def source_files(self, block: str, side: str) -> dict[str, str]:
        """The raw files of the block side's pre-trained source, by role (vectors, index, weights, tokenizer)."""
        files = self.config["sources"][self.source_of(block, side)]["files"]
        return {role: self.raw(path) for role, path in files.items()}

    def layer_spec(self, layer: LayerKey) -> LayerSpec:
        return layer_spec(self.config, layer.block, layer.init, layer.seed, layer.side)

    def layer_file(self, layer: LayerKey) -> str:
        return self.paths.embedding.format(**layer._asdict())

    def layer_inputs(self, layer: LayerKey) -> dict[str, str | list]:
        """A layer's vocabulary, and the block side's pre-trained matrix when its initializer reads one (Xavier reads
        only N and D)."""
        entry = layer_recipe(self.config, layer.init)[0]
        pretrained = self.source_of(layer.block, layer.side) and reads_pretrained(entry)
        return {
            "vocab": self.block_path(self.paths.vocab, layer.block, side=layer.side),
            "pretrained": fill(self.paths.pretrained, block=layer.block, side=layer.side) if pretrained else [],
        }

    # Training stage
    def train_spec(self, run: RunKey) -> RunSpec:
        """A run's spec; a run a figure draws decodes its validation split every epoch (train.valid_bleu: auto)."""
        drawn = (run.block, run.init, run.variant) in self.drawn
        return train_spec(self.config, run.block, run.init, run.seed, run.variant, drawn)

    def run_inputs(self, run: RunKey) -> dict[str, str]:
        """A run's tokenized splits, its layers and, for BLEU, the detokenizer and references."""
        task = self.task_of(run.block)
        inputs = {
            split: self.block_path(self.paths.tokenized, run.block, split=split) for split in self.task_splits(task)
        }
        for side in sides_of(self.config, run.block):
            inputs[f"emb_{side}"] = self.layer_file(LayerKey(run.block, run.init, run.seed, side))
        if evaluated_splits(self.config, task):
            inputs["detokenizer"] = self.block_path(self.paths.detokenizer, run.block)
        for split in evaluated_splits(self.config, task):
            inputs[f"references_{split}"] = self.block_path(self.paths.references, run.block, split=split)
        return inputs

    # Reports stage
    def output_files(self, out: Output) -> dict:
        """An output's file in each of its formats, by format, or its folder; those the HTML report shows
        (Output.shown) are filed there under its category with its caption."""
        if out.kind == "folder":
            return {"folder": directory(fill(self.paths.folder, name=out.name))}
        caption, shown = f"../report/{out.name}.rst", out.shown()
        files = {suffix: fill(self.paths.output_file, name=out.name, suffix=suffix) for suffix in out.formats}
        return {
            suffix: report(path, caption, out.category) if suffix in shown else path for suffix, path in files.items()
        }

    def first_output(self, out: Output) -> str:
        """The file that stands for an output: its aggregate sidecar is beside it, and a stale one forces its job."""
        return str(next(iter(self.output_files(out).values())))

    def output_inputs(self, out: Output, basedir: str) -> dict[str, list[str] | str]:
        """An output's input files: its runs' (the sheet's columns `out.selects.files`), its layer files, and the raw
        files its config sections name; the paper comparison reads the tables built and the seeded ones' runs."""
        if out.name not in self._inputs:  # asked for by its staleness, its job's input and its records param
            runs = self.sheet_of(out)
            inputs = {column: runs[column].tolist() for column in out.selects.files}
            inputs["layers"] = self.layers.path[self.layers.output == out.name].tolist()
            inputs.update({role: self.raw(relpath) for role, relpath in out.raw_files(self.config).items()})
            if out.selects.tables:
                compared = [n for n in self.config["outputs"] if OUTPUTS[n].role.compared]
                inputs["tables"] = [fill(self.paths.output_file, name=n, suffix="csv") for n in compared]
            self._inputs[out.name] = inputs
        inputs = dict(self._inputs[out.name])
        if out.selects.tables:  # the paper's tables, then ours
            paper = os.path.join(basedir, self.config["paper_comparison"]["paper_tables"])
            inputs |= {"paper_tables": paper, "tables": inputs.pop("tables")}
        return inputs

    def output_records(self, out: Output) -> list[str]:
        """The records an output reads (runs' final.json and metrics, compared tables): one missing or changed since
        it was built makes it stale (embinit.identity.records.aggregate_stale_reason)."""
        inputs = self.output_inputs(out, "")
        return sorted({path for key in ("final", "metrics", "tables") for path in inputs.get(key, [])})

    def sheet_of(self, out: Output) -> pd.DataFrame:
        """The run-sheet rows `out` reads (a boolean mask: DataFrame.query, lookup's, is slower)."""
        return self.runs[self.runs.output.isin(out.sheet_outputs(self.config))]

    def sheet_rows(self, out: Output) -> list[dict]:
        """The run-sheet rows `out`'s builder reads (params.rows); the paper comparison's keep their `output`."""
        rows = self.sheet_of(out).drop(columns=[] if out.selects.every_run else EVERY_RUN_COLUMNS)
        return (rows if out.selects.tables else rows.drop(columns="output")).to_dict("records")

    def layer_rows(self, out: Output) -> list[dict]:
        """The layer-sheet rows `out`'s builder reads (params.layers)."""
        return self.layers[self.layers.output == out.name].drop(columns="output").to_dict("records")
