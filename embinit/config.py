"""The configuration: cross-reference checks the JSON schema cannot express, and the grid it describes.

`check` runs when the Snakefile loads, before any job, so a typo fails in a second with the key and the
allowed values rather than hours later inside a training job.
"""
from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    pass


def _require(value, allowed, key: str) -> None:
    if value not in allowed:
        raise ConfigError(f"config key {key}: unknown name {value!r}; allowed: {', '.join(sorted(allowed))}")


def check(config: dict) -> None:
    """Raise ConfigError naming the key if a name does not refer to something defined."""
    from embinit.embeddings import MISSING_POLICIES
    from embinit.initializers import INITIALIZERS as REGISTRY

    if config["mirror"] is not None and not Path(config["mirror"]).is_dir():
        raise ConfigError(f"config key mirror: directory {config['mirror']!r} does not exist")
    for i, name in enumerate(config["initializers"]):
        _require(name, REGISTRY, f"initializers[{i}]")
    for name in config["initializer_params"]:
        _require(name, REGISTRY, f"initializer_params.{name}")
    _require(config["embeddings"]["missing"], MISSING_POLICIES, "embeddings.missing")
    for i, block in enumerate(config["run_blocks"]):
        _require(block, config["blocks"], f"run_blocks[{i}]")
    for name, task in config["tasks"].items():
        if task["kind"] == "classification" and "num_classes" not in task:
            raise ConfigError(f"config key tasks.{name}.num_classes: required for a classification task")
        for role, relpath in task["files"].items():
            _require(relpath, config["remotes"], f"tasks.{name}.files.{role}")
    for name, source in config["sources"].items():
        for role, relpath in source["files"].items():
            _require(relpath, config["remotes"], f"sources.{name}.files.{role}")
    for name, block in config["blocks"].items():
        _check_block(config, name, block)
    for key in ("table3", "table4", "table6"):
        _require(config[key]["block"], config["blocks"], f"{key}.block")
    for i, name in enumerate(config["table3"]["variants"]):
        _require(name, config["variants"], f"table3.variants[{i}]")
    for i, name in enumerate(config["table3"]["initializers"]):
        _require(name, REGISTRY, f"table3.initializers[{i}]")
    for i, name in enumerate(config["figure1"]["blocks"]):
        _require(name, config["blocks"], f"figure1.blocks[{i}]")
    _require(config["table4"]["questions"], config["remotes"], "table4.questions")


def _check_block(config: dict, name: str, block: dict) -> None:
    from embinit.initializers import INITIALIZERS as REGISTRY

    _require(block["task"], config["tasks"], f"blocks.{name}.task")
    sides = sides_of(config, name)
    if set(block["sources"]) != set(sides):
        raise ConfigError(f"config key blocks.{name}.sources: a {config['tasks'][block['task']]['kind']} task "
                          f"needs exactly the sides {sides}, got {sorted(block['sources'])}")
    used = [s for s in block["sources"].values() if s is not None]
    if not used:
        raise ConfigError(f"config key blocks.{name}.sources: at least one side needs a source")
    for side, source in block["sources"].items():
        if source is not None:
            _require(source, config["sources"], f"blocks.{name}.sources.{side}")
    if len({config["sources"][s]["dim"] for s in used}) > 1:
        raise ConfigError(f"config key blocks.{name}.sources: sides have different dimensions; d_model is shared")
    subword = {s for s in used if config["sources"][s]["level"] == "subword"}
    if subword and (len(subword) > 1 or len(subword) != len(set(used))):
        raise ConfigError(f"config key blocks.{name}.sources: a sub-word source must be the only source of its block")
    for i, init in enumerate(block.get("initializers", [])):
        _require(init, REGISTRY, f"blocks.{name}.initializers[{i}]")


def sides_of(config: dict, block: str) -> list[str]:
    kind = config["tasks"][config["blocks"][block]["task"]]["kind"]
    return ["encoder", "decoder"] if kind == "translation" else ["encoder"]


def tokenizer_of(config: dict, block: str) -> str:
    """`spacy` for word-level blocks, else the sub-word source whose tokenizer the block uses."""
    for source in config["blocks"][block]["sources"].values():
        if source is not None and config["sources"][source]["level"] == "subword":
            return source
    return "spacy"


def dim_of(config: dict, block: str) -> int:
    source = next(s for s in config["blocks"][block]["sources"].values() if s is not None)
    return config["sources"][source]["dim"]


def initializers_of(config: dict, block: str) -> list[str]:
    """The block's own list when it has one (restricted to the configured initializers), else all of them."""
    wanted = config["blocks"][block].get("initializers", config["initializers"])
    return [i for i in config["initializers"] if i in wanted]


def seeds_of(config: dict, block: str) -> list[int]:
    return list(range(config["blocks"][block]["seeds"]))

