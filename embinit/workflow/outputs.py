"""The outputs a config can ask for (config `outputs`), each declared once (`Output`): its kind and the files it is
written as, what its rule reads (`Selection`: runs, layers or every run), its part in the paper comparison and in
training (`Role`), what its config section must hold (`Requires`) and where the HTML report files it (caption:
report/<name>.rst); its builder is the function of its name in embinit.reports.builders. The config check, the run
and layer sheets, the rules and the report script read this registry; a new table is one entry here, one builder
function and one caption. It imports no report code, so building the DAG does not load pandas' plotting or scipy's
statistics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable, Iterator, Literal

import pandas as pd

from embinit.workflow.config import (
    initializer_setting,
    initializers_of,
    lr_variants,
    scaled_initializers,
    sides_of,
    tokenizer_of,
)

# One file of a block side an output reads: block, side, file ("layer": an initializer's layer; "pretrained": the
# side's pre-trained matrix; "tokens": its rows' tokens; "vocab": the side's vocabulary; "tokenizer": the raw file of
# a sub-word block's tokenizer), initializer (None but for a layer) and seed
Layer = tuple[str, str, str, str | None, int]

Kind = Literal["table", "figure", "folder"]

# The files <name>.<format> an output is written as unless its entry says otherwise, by kind: a table's CSV and
# Markdown, a figure's PNG with its data as CSV; a folder (<results_dir>/<name>/: event files, exported layers) has none
FORMATS: dict[Kind, tuple[str, ...]] = {"table": ("csv", "md"), "figure": ("png", "csv"), "folder": ()}

RAW_KEYS = ("questions",)  # keys of an output's config section that name a raw file it reads


@dataclass(frozen=True)
class Selection:
    """What an output reads, declared once: its rule's inputs and its builder's rows follow (embinit.workflow.runsheet)."""

    # its selection of training runs, `runs(config)`: blocks, initializers, variants, seeds (embinit.workflow.runsheet)
    runs: Callable[[dict], dict] | None = None
    files: tuple[str, ...] = ("final",)  # the run sheet's file columns its rule takes as input
    # the layer files it reads, `layers(config, runs)` (`runs`: its run-sheet rows)
    layers: Callable[[dict, pd.DataFrame], Iterator[Layer]] | None = None
    # its runs are every run of the config's outputs and every run record under results_dir (embinit.workflow.runsheet)
    every_run: bool = False
    tables: bool = False  # the `compared` tables built and the runs of the `seeded` ones (the paper comparison)
    # A sweep's runs beyond the configured ones: variants (name -> switches, with its `lr`) and initializers (name ->
    # the registry entry and params its layer runs), named so that their runs fit results/<block>/<init>/seed<k>/<variant>/
    variants: Callable[[dict], dict[str, dict]] | None = None
    initializers: Callable[[dict], dict[str, tuple[str, dict]]] | None = None


@dataclass(frozen=True)
class Role:
    """What an output is to the rest of the pipeline: to the paper comparison, its runs' training, the scheduler."""

    seeded: bool = False  # cells are means over seeds: paper_comparison judges the findings on its runs
    compared: bool = False  # paper_comparison reads its CSV
    valid_bleu: bool = False  # plots validation BLEU per epoch: its runs decode it (config train.valid_bleu: auto)
    local: bool = True  # cheap: runs on the machine Snakemake runs on (profiles/slurm submits the others)


@dataclass(frozen=True)
class Requires:
    """What the config section named as the output must hold, so a wrong one stops before any job (embinit.workflow.checks)."""

    translation: bool = False  # its blocks are translation blocks: it reports BLEU or the decoder
    source: bool = False  # its block's `side` has a pre-trained source: it reads that side's pre-trained layer


@dataclass(frozen=True)
class Output:
    """One table, figure or folder, built by the function of its name in embinit.reports.builders."""

    name: str
    category: str  # where the HTML report files it
    selects: Selection
    kind: Kind = "table"
    formats: tuple[str, ...] | None = None  # the files <name>.<format> it is written as; None: its kind's (FORMATS)
    sections: tuple[str, ...] = ()  # the config sections its builder reads (params.config): a change rebuilds it
    role: Role = Role()
    requires: Requires = Requires()

    def __post_init__(self):
        if self.formats is None:  # its kind's (a frozen dataclass sets a field through object.__setattr__)
            object.__setattr__(self, "formats", FORMATS[self.kind])

    def shown(self) -> set[str]:
        """The formats the HTML report shows: a PNG, an HTML page, and a table's CSV where it has no page."""
        shown = {"png", "html"} & set(self.formats)
        return shown | ({"csv"} if self.kind == "table" and "html" not in shown else set())

    def config_of(self, config: dict) -> dict:
        """The config sections its builder reads, with model and the sources of the blocks they name: a change there
        rebuilds it, and an initializer or block added elsewhere does not."""
        sections = [s for s in self.sections if s in config]  # Table 14's is only in the result sets that run it
        if not sections:
            return {}
        blocks = sorted({b for s in sections for b in config[s].get("blocks") or [config[s]["block"]]})
        sources = sorted({src for b in blocks for src in config["blocks"][b]["sources"].values() if src})
        return {
            **{s: config[s] for s in sections},
            "model": config["model"],
            "blocks": {b: {"sources": config["blocks"][b]["sources"]} for b in blocks},
            "sources": {src: config["sources"][src] for src in sources},
        }

    def sheet_outputs(self, config: dict) -> list[str]:
        """The outputs whose run-sheet rows it reads: its own, or for the paper comparison the seeded tables built."""
        return [n for n in config["outputs"] if OUTPUTS[n].role.seeded] if self.selects.tables else [self.name]

    def raw_files(self, config: dict) -> dict[str, str]:
        """The raw files (remotes' relpaths) its config sections name, by key: Table 4's word-analogy questions."""
        return {key: config[s][key] for s in self.sections if s in config for key in RAW_KEYS if key in config[s]}


def _first_sourced_layers(config: dict, keep: Callable[[str], bool]) -> Iterator[Layer]:
    """Seed 0's layer of each run block's first side with a source, for the initializers `keep` accepts; a block
    with no source (a Xavier-only block) has no pre-trained layer to describe."""
    for block in config["run_blocks"]:
        sides = [side for side, source in config["blocks"][block]["sources"].items() if source]
        if sides:
            yield from ((block, sides[0], "layer", init, 0) for init in initializers_of(config, block) if keep(init))


def _pretrained(config: dict, name: str, files=("pretrained", "tokens")) -> list[Layer]:
    """The pre-trained matrix (and its tokens) of config section `name`'s block and side."""
    return [(config[name]["block"], config[name]["side"], file, None, 0) for file in files]


def paper_table(name: str) -> int | None:
    """The number of the paper's table an output is (`table<N>`), None for an output of another name."""
    return int(m[1]) if (m := re.fullmatch(r"table(\d+)", name)) else None


def seeded_tables() -> list[int]:
    """The numbers of the paper's tables whose cells are means over seeds (paper_comparison pairs their checks by
    seed); a seeded output of another name is no paper table."""
    return [paper_table(name) for name, out in OUTPUTS.items() if out.role.seeded and paper_table(name) is not None]


def _seeded_runs(name: str) -> Callable[[dict], dict]:
    """Config section `name`'s selection of one block: its initializers and variants, and seeds where a cell has
    fewer (or more) runs than the block (`seeds`, `seeds_by_variant`, `seeds_by_initializer`)."""

    def runs(config: dict) -> dict:
        section = config[name]
        return {
            "blocks": [section["block"]],
            "initializers": section["initializers"],
            "variants": section["variants"],
            "seeds": section.get("seeds"),
            "seeds_by_variant": section.get("seeds_by_variant", {}),
            "seeds_by_initializer": section.get("seeds_by_initializer", {}),
        }

    return runs


def _section_runs(name: str, parts=("blocks", "initializers", "variants")) -> Callable[[dict], dict]:
    """Config section `name`'s selection: its blocks, initializers and variants."""
    return lambda config: {part: config[name][part] for part in parts}


def _run_layers(config: dict, runs: pd.DataFrame) -> Iterator[Layer]:
    """The layers its runs start from, each block side's vocabulary and a sub-word block's tokenizer file."""
    started = runs[["block", "initializer", "seed"]].drop_duplicates()
    for block, init, seed in started.itertuples(index=False):
        yield from ((block, side, "layer", init, int(seed)) for side in sides_of(config, block))
    for block in dict.fromkeys(started.block):
        yield from ((block, side, "vocab", None, 0) for side in sides_of(config, block))
        if tokenizer_of(config, block) != "spacy":
            yield block, sides_of(config, block)[0], "tokenizer", None, 0


def _table12_layers(config: dict) -> dict[str, tuple[str, dict]]:
    doses = scaled_initializers(config["table12"])
    return {name: ("Scaled", dose) for name, dose in doses.items() if name != dose["base"]}


def _table13_variants(config: dict) -> dict[str, dict]:
    return {
        name: {**config["variants"]["base"], "lr": lr} for name, lr in lr_variants(config).items() if name != "base"
    }


def _table14_runs(config: dict) -> dict:
    """Table 14's blocks, each with its own initializers, under its one variant; none without its section (the
    paper's grid has none: config/offline-cpu.yaml defines it on the stand-ins)."""
    section = config.get("table14")
    return {"blocks": section["blocks"], "variants": [section["variant"]]} if section else {"blocks": []}


def _table14_layers(config: dict, runs: pd.DataFrame) -> Iterator[Layer]:
    """Seed 0's layer of each of its runs' first side with a source: the sigma its row reports."""
    for block, init in dict.fromkeys(zip(runs.block, runs.initializer)):
        side = next(side for side, source in config["blocks"][block]["sources"].items() if source)
        yield block, side, "layer", init, 0


OUTPUTS: dict[str, Output] = {
    o.name: o
    for o in [
        Output(  # Table 1 leaves the Xavier_Pretrained control to Table 7
            "table1",
            "Tables",
            Selection(
                runs=lambda config: {
                    "blocks": config["run_blocks"],
                    "initializers": [i for i in config["initializers"] if i != "Xavier_Pretrained"],
                    "seeds_by_initializer": config.get("table1", {}).get("seeds_by_initializer", {}),
                }
            ),
            role=Role(seeded=True, compared=True),
        ),
        # Table 2 leaves out _Shuffled ("identical distribution to Pre-trained", the paper omits its rows) and the
        # Xavier_Pretrained control (Table 8)
        Output(
            "table2",
            "Tables",
            Selection(
                layers=lambda config, runs: _first_sourced_layers(
                    config, lambda init: init not in ("Xavier_Pretrained", "Pretrained_Shuffled")
                )
            ),
            role=Role(compared=True),
        ),
        Output(
            "table3",
            "Tables",
            Selection(runs=_seeded_runs("table3"), files=("final", "metrics")),  # metrics: its input ratios
            role=Role(seeded=True, compared=True),
            requires=Requires(translation=True),
        ),
        Output(
            "table4",
            "Tables",
            Selection(layers=lambda config, runs: _pretrained(config, "table4")),
            sections=("table4",),
            role=Role(compared=True, local=False),
            requires=Requires(source=True),
        ),
        Output(
            "table4_sensitivity",
            "Tables",
            Selection(layers=lambda config, runs: _pretrained(config, "table4")),
            sections=("table4",),
            role=Role(local=False),
        ),
        Output(
            "table5",
            "Tables",
            Selection(runs=lambda config: {"blocks": config["run_blocks"]}),
            role=Role(compared=True),
        ),
        Output(
            "table6",
            "Tables",
            Selection(
                layers=lambda config, runs: (
                    (config["table6"]["block"], config["table6"]["side"], "layer", init, 0)
                    for init in ("Xavier", "Pretrained", "Pretrained_Xavier")
                )
            ),
            sections=("table6",),
            role=Role(compared=True),
            requires=Requires(source=True),
        ),
        Output(
            "table7",
            "Tables",
            Selection(
                runs=lambda config: {
                    "blocks": [b for b in config["run_blocks"] if "Xavier_Pretrained" in initializers_of(config, b)],
                    "initializers": ["Xavier", "Xavier_Pretrained"],
                }
            ),
            role=Role(seeded=True, compared=True),
        ),
        Output(
            "table8",
            "Tables",
            Selection(
                layers=lambda config, runs: _first_sourced_layers(config, lambda init: init == "Xavier_Pretrained")
            ),
            role=Role(compared=True),
        ),
        Output(
            "figure1",
            "Figure 1",
            Selection(
                runs=lambda config: {
                    "blocks": config["figure1"]["blocks"],
                    "initializers": config["figure1"]["initializers"],
                    "seeds": config["figure1"].get("seeds", {}),
                },
                files=("final", "metrics"),
            ),
            kind="figure",
            role=Role(valid_bleu=True),
            requires=Requires(translation=True),
        ),
        Output(
            "table9",
            "Beyond the paper",
            Selection(runs=_section_runs("table9")),
            role=Role(compared=True),
        ),
        Output(
            "table10",
            "Beyond the paper",
            Selection(
                runs=lambda config: {
                    "blocks": [config["table10"]["block"]],
                    "initializers": config["table10"]["initializers"],
                },
                files=("final", "trained"),
                layers=lambda config, runs: [
                    *_pretrained(config, "table10", ["tokens"]),
                    *((r.block, config["table10"]["side"], "layer", r.initializer, r.seed) for r in runs.itertuples()),
                ],
            ),
            sections=("table10", "table4"),
            role=Role(local=False),
            requires=Requires(source=True),
        ),
        Output(
            "table11",
            "Beyond the paper",
            Selection(runs=_section_runs("table11")),
            requires=Requires(translation=True),
        ),
        Output(
            "figure2",
            "Beyond the paper",
            Selection(runs=_section_runs("figure2", ("blocks", "initializers")), files=("final", "metrics")),
            kind="figure",
        ),
        Output(  # the pre-trained layer and Xavier's at k times their sigma: scale apart from content
            "table12",
            "Beyond the paper",
            Selection(
                runs=lambda config: {
                    "blocks": [config["table12"]["block"]],
                    "initializers": list(scaled_initializers(config["table12"])),
                },
                initializers=_table12_layers,
            ),
            formats=("csv", "md", "png"),
            sections=("table12",),
            role=Role(compared=True),
        ),
        Output(  # Finding 1's checks at each learning rate
            "table13",
            "Beyond the paper",
            Selection(
                runs=lambda config: {
                    "blocks": [config["table13"]["block"]],
                    "initializers": config["table13"]["initializers"],
                    "variants": list(lr_variants(config)),
                },
                variants=_table13_variants,
            ),
            formats=("csv", "md", "png"),
            role=Role(compared=True),
        ),
        Output(  # the field's initializers against Xavier and the paper's proposal, all under one recipe (issue 41)
            "table14",
            "Beyond the paper",
            Selection(runs=_table14_runs, layers=_table14_layers),
            formats=("csv", "md", "png"),
            sections=("table14",),
            role=Role(compared=True),
        ),
        Output(  # Table 3's cells under the first model and the paper's recipe, one change at a time
            "recipe_ablation",
            "Beyond the paper",
            Selection(runs=_seeded_runs("recipe_ablation"), files=("final", "metrics")),
            formats=("csv", "md", "png"),
            requires=Requires(translation=True),
        ),
        Output("paper_comparison", "Paper vs ours", Selection(tables=True)),
        Output("findings", "Paper vs ours", Selection(tables=True)),  # the paper's claims, a row each
        Output(  # every run in one table: the HTML report's is sortable and filterable
            "runs",
            "Runs",
            Selection(files=("final", "metrics"), every_run=True),
            formats=("csv", "parquet", "html"),
        ),
        Output("tensorboard", "Runs", Selection(files=("final", "metrics"), every_run=True), kind="folder"),
        Output(  # the layers the runs start from, as safetensors with their vocabulary, for other training code
            "layer_export",
            "Runs",
            Selection(files=(), layers=_run_layers, every_run=True),
            kind="folder",
        ),
        Output(
            "embedding_matches",
            "Embeddings",
            Selection(
                layers=lambda config, runs: (
                    (block, side, "tokens", None, 0)
                    for block in config["run_blocks"]
                    for side, source in config["blocks"][block]["sources"].items()
                    if source is not None
                )
            ),
            formats=("csv",),
        ),
    ]
}


def _generated(config: dict, part: str) -> dict:
    """The variants or initializers (`part`) the sweeps of the outputs the config has a section for add."""
    return {
        name: entry
        for out in OUTPUTS.values()
        if getattr(out.selects, part) and out.name in config
        for name, entry in getattr(out.selects, part)(config).items()
    }


def generated_variants(config: dict) -> dict[str, dict]:
    """The variants the sweeps add (Table 13's learning rates): name -> switches, with its `lr`."""
    return _generated(config, "variants")


def variants_of(config: dict) -> dict[str, dict]:
    """Every variant a run may name: the config's and the sweeps'."""
    return {**config["variants"], **generated_variants(config)}


def variant_settings(config: dict, switches: dict, section: str) -> dict:
    """Config section `section` (`model` or `train`) as a variant runs it: its own keys there over the config's."""
    return {**config[section], **switches.get(section, {})}


# `train` keys that change how fast a step runs and its floats' last bits only: in a run's spec (its identity) under
# `speed_options` when on, and absent when off, so the default spec, and with it every earlier run's digest, is the same
SPEED_OPTIONS = ("compile", "packed")


def speed_options(config: dict, block: str, init: str, seed: int, variant: str) -> list[str]:
    """The speed options a run trains with: its variant's `train` settings, or its block's `speed_runs`, whose shell
    patterns name runs `<initializer>/seed<k>/<variant>` (a block's later seeds may train faster, its earlier runs
    untouched)."""
    train = variant_settings(config, variants_of(config)[variant], "train")
    name, named = f"{init}/seed{seed}/{variant}", config["blocks"][block].get("speed_runs", {})
    return [k for k in SPEED_OPTIONS if train.get(k, False) or any(fnmatchcase(name, p) for p in named.get(k, ()))]


def generated_initializers(config: dict) -> dict[str, tuple[str, dict]]:
    """The initializers the sweeps add (Table 12's rescaled layers): name -> registry entry and params."""
    return _generated(config, "initializers")


def layer_recipe(config: dict, init: str) -> tuple[str, dict]:
    """The registry entry and params a layer of `init` runs: a sweep's, or the configured name's
    (embinit.workflow.config.initializer_setting)."""
    return generated_initializers(config).get(init) or initializer_setting(config, init)


def targeted_outputs(config: dict, targets, results_dir: str) -> list[str]:
    """The outputs a run's targets build (`all`: config `outputs`; an output's rule or one of its files), in order:
    what its end message names."""
    names = []
    for target in targets:
        if target == "all":
            names += config["outputs"]
        elif target in OUTPUTS:
            names.append(target)
        elif Path(target).parent == Path(results_dir) and Path(target).stem in OUTPUTS:
            names.append(Path(target).stem)
    return list(dict.fromkeys(names))
