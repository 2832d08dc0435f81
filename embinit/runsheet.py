"""The run sheet: every training run the outputs use, one tidy row per (output, run), built once from the config.

The rules take each output's inputs from it and hand each report exactly its rows, so which runs a table shows is
decided here and only here; a report never re-filters by config. A row says what its run is (block, task, sources,
initializer, seed, variant and the variant's switches), how the paper's tables name it (`label`) and where its files
are. Adding a table that shows runs is one entry in `selections`.
"""

from __future__ import annotations

import pandas as pd

from embinit.config import initializers_of, seeds_of
from embinit.layers.initializers import display_name

COLUMNS = [
    "output",
    "block",
    "task",
    "kind",
    "family",
    "sources",
    "source_display",
    "initializer",
    "label",
    "seed",
    "variant",
    "pos_encoding",
    "embedding_trainable",
    "output_embedding",
]


def selections(config: dict) -> list[dict]:
    """Which runs each output shows: its blocks, initializers (None: each block's own), variants and seeds (None:
    each block's; an int: the first that many; a dict: per block, as Figure 1's five-seed GloVe panel), and for
    Table 3 seeds per variant where a cell has more runs than the others (`seeds_by_variant`)."""
    t3, t10 = config["table3"], config["table10"]
    table1 = [i for i in config["initializers"] if i != "Xavier_Pretrained"]  # that one is Table 7
    with_control = [b for b in config["run_blocks"] if "Xavier_Pretrained" in initializers_of(config, b)]
    return [
        {"output": "table1", "blocks": config["run_blocks"], "initializers": table1},
        {"output": "table5", "blocks": config["run_blocks"]},
        {"output": "table7", "blocks": with_control, "initializers": ["Xavier", "Xavier_Pretrained"]},
        {
            "output": "table3",
            "blocks": [t3["block"]],
            "initializers": t3["initializers"],
            "variants": t3["variants"],
            "seeds": t3.get("seeds"),
            "seeds_by_variant": t3.get("seeds_by_variant", {}),
        },  # fmt: skip
        {
            "output": "figure1",
            "blocks": config["figure1"]["blocks"],
            "initializers": config["figure1"]["initializers"],
            "seeds": config["figure1"].get("seeds", {}),
        },  # fmt: skip
        *(
            {"output": k, **{s: config[k][s] for s in ("blocks", "initializers", "variants")}}
            for k in ("table9", "table11")
        ),
        {"output": "table10", "blocks": [t10["block"]], "initializers": t10["initializers"]},
        {"output": "figure2", "blocks": config["figure2"]["blocks"], "initializers": config["figure2"]["initializers"]},
    ]


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


def describe(config: dict, block: str, init: str, seed: int, variant: str) -> dict:
    """A run's row without its output and files: what it is and how the paper's tables name it."""
    cfg, switches = config["blocks"][block], config["variants"][variant]
    sources, display = block_sources(config, block)
    return {
        "block": block,
        "task": cfg["task"],
        "kind": config["tasks"][cfg["task"]]["kind"],
        "family": cfg["family"],
        "sources": sources,
        "source_display": display,
        "initializer": init,
        "label": display_name(init, cfg["family"]),
        "seed": seed,
        "variant": variant,
        "pos_encoding": switches["pos_encoding"],
        "embedding_trainable": switches["embedding_trainable"],
        "output_embedding": switches.get("output_embedding", "untied"),
    }


def run_sheet(config: dict, paths: dict[str, str]) -> pd.DataFrame:
    """One row per (output, run) of `selections`, in the config's order, with a column per `paths` template
    (name -> template with {block}, {init}, {seed}, {variant}: the run's files)."""
    rows = [
        {
            "output": sel["output"],
            **describe(config, block, init, seed, variant),
            **{name: t.format(block=block, init=init, seed=seed, variant=variant) for name, t in paths.items()},
        }
        for sel in selections(config)
        for block in sel["blocks"]
        for init in initializers_of(config, block)
        if sel.get("initializers") is None or init in sel["initializers"]
        for variant in sel.get("variants", ["base"])
        for seed in _seeds(config, block, sel.get("seeds_by_variant", {}).get(variant, sel.get("seeds")))
    ]
    return pd.DataFrame(rows, columns=COLUMNS + list(paths))


def trained_blocks(config: dict) -> list[str]:
    """Blocks whose models train: those of every output's selection, in order (Tables 3, 9-11 and the figures train
    their own runs, in run_blocks or not)."""
    return list(dict.fromkeys(block for sel in selections(config) for block in sel["blocks"]))
