"""The configuration: loading, schema validation, cross-reference checks the schema cannot express, and the
grid it describes.

`load`, `validate` and `check` run when the Snakefile loads, before any job, so a typo fails in a second with
the file or key and the allowed values rather than hours later inside a training job.
"""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import jsonschema
import yaml


class ConfigError(ValueError):
    pass


def _require(value, allowed, key: str) -> None:
    if value not in allowed:
        raise ConfigError(f"config key {key}: unknown name {value!r}; allowed: {', '.join(sorted(allowed)) or 'none'}")


def load(path) -> dict:
    """The mapping a YAML config file holds. Snakemake's own error for an empty or unparsable file names no file."""
    with open(path, "rb") as f:  # bytes, so that undecodable text is a YAMLError naming the file too
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML:\n{e}") from None
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"config file {path} is {what}; it must map config keys to values")
    return data


def validate(config: dict, schema_path, files) -> None:
    """Raise ConfigError with one line per schema violation: its key, and the value and what is allowed.

    Snakemake's `validate` reports only the first violation and prints the schema below it, which for a
    top-level key is the whole schema. `files` are the config files merged into `config`, named in the error.
    """
    schema = yaml.safe_load(Path(schema_path).read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: e.json_path)
    if errors:
        lines = [f"config key {e.json_path[2:] or '(top level)'}: {e.message}" for e in errors]
        raise ConfigError(
            f"the config from {', '.join(map(str, files))} does not match {schema_path}:\n" + "\n".join(lines)
        )


def check(config: dict) -> None:
    """Raise ConfigError naming the key if a name does not refer to something defined, or a value does not fit
    where it is used.

    The `extensions` files are loaded first (embinit.extensions.load), so the names they register are allowed.
    """
    from embinit.extensions import ExtensionError, load as load_extensions
    from embinit.layers.pretrained import MISSING_POLICIES
    from embinit.layers.initializers import INITIALIZERS as REGISTRY
    from embinit.models.position import POSITION_ENCODINGS

    for i, path in enumerate(config.get("extensions") or []):
        try:
            load_extensions([path])
        except ExtensionError as e:
            raise ConfigError(f"config key extensions[{i}]: {e}") from None
    if config["mirror"] is not None and not Path(config["mirror"]).is_dir():
        raise ConfigError(f"config key mirror: directory {config['mirror']!r} does not exist")
    for i, name in enumerate(config["initializers"]):
        _require(name, REGISTRY, f"initializers[{i}]")
    for name, params in config["initializer_params"].items():
        _require(name, REGISTRY, f"initializer_params.{name}")
        _check_params(REGISTRY[name], params, f"initializer_params.{name}")
    _require(config["embeddings"]["missing"], MISSING_POLICIES, "embeddings.missing")
    for name, params in config["embeddings"]["missing_params"].items():  # by policy, as initializer_params
        _require(name, MISSING_POLICIES, f"embeddings.missing_params.{name}")
        _check_params(MISSING_POLICIES[name], params, f"embeddings.missing_params.{name}", skip=1)
    for name, variant in config["variants"].items():
        _require(variant["pos_encoding"], POSITION_ENCODINGS, f"variants.{name}.pos_encoding")
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
    for name in config["figure1"].get("seeds", {}):  # a block not in the figure is allowed: an overlay such as
        _require(name, config["blocks"], f"figure1.seeds.{name}")  # offline-cpu.yaml cannot delete keys
    _require(config["table4"]["questions"], config["remotes"], "table4.questions")
    _check_beyond(config, REGISTRY)
    _check_outputs(config)
    _check_heads(config)


def _check_params(fn, params: dict, key: str, skip: int = 3) -> None:
    """Each parameter must be one the function takes (after its first `skip`: an initializer's `pretrained, shape,
    rng`, a missing-row policy's `ctx`), of its annotated type (`int`, `float`, `str`, `bool`), with a value its
    `Literal[...]` annotation allows when it has one, and no less than an `Annotated[..., AtLeast(x)]` bound."""
    from embinit.layers.initializers import AtLeast

    accepted = list(inspect.signature(fn).parameters)[skip:]
    hints = typing.get_type_hints(fn, include_extras=True)
    for name, value in params.items():
        _require(name, accepted, f"{key}.{name}")
        hint, bounds = hints.get(name), []
        if typing.get_origin(hint) is typing.Annotated:
            hint, *extras = typing.get_args(hint)
            bounds = [x.value for x in extras if isinstance(x, AtLeast)]
        if typing.get_origin(hint) is typing.Literal:
            _require(value, typing.get_args(hint), f"{key}.{name}")
        elif hint in _TYPES and not _TYPES[hint](value):
            raise ConfigError(f"config key {key}.{name}: {value!r} is not {_TYPE_NAMES[hint]}")
        for bound in bounds:
            if not _TYPES[float](value) or value < bound:
                raise ConfigError(f"config key {key}.{name}: {value!r} is less than the minimum {bound}")


_TYPES = {
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
}
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _check_beyond(config: dict, initializers: dict) -> None:
    """Tables 9-11 and Figure 2 (beyond the paper) name blocks, initializers and variants that exist."""
    for key in ("table9", "table11", "figure2"):
        for i, name in enumerate(config[key]["blocks"]):
            _require(name, config["blocks"], f"{key}.blocks[{i}]")
    _require(config["table10"]["block"], config["blocks"], "table10.block")
    for key in ("table9", "table10", "table11", "figure2"):
        for i, name in enumerate(config[key]["initializers"]):
            _require(name, initializers, f"{key}.initializers[{i}]")
    for key in ("table9", "table11"):
        for i, name in enumerate(config[key]["variants"]):
            _require(name, config["variants"], f"{key}.variants[{i}]")


def _check_outputs(config: dict) -> None:
    """Table 3 and Figure 1 report BLEU and Table 11 couples the translator's output embedding, so they need
    translation blocks; Tables 4, 6 and 10 read a side's pre-trained layer, so need a side with a source."""
    translation = [
        ("table3.block", config["table3"]["block"]),
        *((f"figure1.blocks[{i}]", name) for i, name in enumerate(config["figure1"]["blocks"])),
        *((f"table11.blocks[{i}]", name) for i, name in enumerate(config["table11"]["blocks"])),
    ]
    for key, name in translation:
        if config["tasks"][config["blocks"][name]["task"]]["kind"] != "translation":
            raise ConfigError(
                f"config key {key}: block {name!r} is not a translation block; Table 3 and Figure 1 report BLEU, "
                "Table 11 couples the translator's output embedding"
            )
    for table in ("table4", "table6", "table10"):
        name, side = config[table]["block"], config[table]["side"]
        _require(side, sides_of(config, name), f"{table}.side")
        if config["blocks"][name]["sources"][side] is None:
            raise ConfigError(
                f"config key {table}.side: the {side} of block {name!r} has no pre-trained source "
                f"(blocks.{name}.sources.{side} is null); {table} needs one"
            )


def _check_heads(config: dict) -> None:
    """Attention splits d_model = D into equal heads; otherwise the first training job would fail."""
    for name in trained_blocks(config):
        dim = dim_of(config, name)
        heads = heads_for(config["model"], dim)
        if dim % heads:
            key = f"model.heads_by_dim.{dim}" if dim in _heads_by_dim(config["model"]) else "model.heads"
            raise ConfigError(
                f"config key {key}: {heads} heads do not divide D = {dim} of block {name!r}; "
                f"set model.heads_by_dim.{dim} to a divisor of {dim}"
            )


def _check_block(config: dict, name: str, block: dict) -> None:
    from embinit.layers.initializers import INITIALIZERS as REGISTRY

    _require(block["task"], config["tasks"], f"blocks.{name}.task")
    sides = sides_of(config, name)
    if set(block["sources"]) != set(sides):
        raise ConfigError(
            f"config key blocks.{name}.sources: a {config['tasks'][block['task']]['kind']} task "
            f"needs exactly the sides {sides}, got {sorted(block['sources'])}"
        )
    used = [s for s in block["sources"].values() if s is not None]
    if not used and "dim" not in block:
        raise ConfigError(f"config key blocks.{name}: a block with no pre-trained source needs `dim` (its D)")
    for side, source in block["sources"].items():
        if source is not None:
            _require(source, config["sources"], f"blocks.{name}.sources.{side}")
    dims = {config["sources"][s]["dim"] for s in used} | ({block["dim"]} if "dim" in block else set())
    if len(dims) > 1:
        raise ConfigError(
            f"config key blocks.{name}: its sources and `dim` give different dimensions {sorted(dims)}; d_model is shared"
        )
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


def valid_bleu_of(config: dict, block: str, initializer: str, variant: str) -> bool:
    """Whether a run decodes its validation split for BLEU every epoch: under `train.valid_bleu: auto` only the
    runs Figure 1 plots, since selection and Tables 1, 3 and 7 need only the validation loss and test BLEU."""
    setting, figure = config["train"]["valid_bleu"], config["figure1"]
    if setting != "auto":
        return bool(setting)
    return variant == "base" and block in figure["blocks"] and initializer in figure["initializers"]


def lr_of(config: dict, block: str) -> float:
    """The block's `lr` when it sets one, else its task's (the paper's rate per task): a stand-in of another width
    may need its own rate to converge in the epochs it is given."""
    block_cfg = config["blocks"][block]
    return block_cfg.get("lr", config["tasks"][block_cfg["task"]]["lr"])


def trained_blocks(config: dict) -> list[str]:
    """Blocks whose models train: run_blocks and the blocks of Tables 3, 9, 10, 11 and Figures 1, 2 (which train
    their own runs, in run_blocks or not)."""
    named = [*config["run_blocks"], config["table3"]["block"], *config["figure1"]["blocks"], config["table10"]["block"]]
    named += [*config["table9"]["blocks"], *config["table11"]["blocks"], *config["figure2"]["blocks"]]
    return list(dict.fromkeys(named))


def _heads_by_dim(model_cfg: dict) -> dict[int, int]:
    return {int(k): v for k, v in (model_cfg.get("heads_by_dim") or {}).items()}


def heads_for(model_cfg: dict, dim: int) -> int:
    """`model.heads`, unless `model.heads_by_dim` names this D (the paper uses 10 heads for D = 300)."""
    return _heads_by_dim(model_cfg).get(dim, model_cfg["heads"])


def dim_of(config: dict, block: str) -> int:
    """D of a block: its sources' dimension, or its own `dim` when no side has a source (a Xavier-only block)."""
    block_cfg = config["blocks"][block]
    source = next((s for s in block_cfg["sources"].values() if s is not None), None)
    return block_cfg["dim"] if source is None else config["sources"][source]["dim"]


def initializers_of(config: dict, block: str) -> list[str]:
    """The block's own list when it has one (restricted to the configured initializers), else all of them."""
    wanted = config["blocks"][block].get("initializers", config["initializers"])
    return [i for i in config["initializers"] if i in wanted]


def seeds_of(config: dict, block: str) -> list[int]:
    return list(range(config["blocks"][block]["seeds"]))
