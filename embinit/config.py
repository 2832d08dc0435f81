"""The configuration: loading, schema validation, cross-reference checks the schema cannot express, and the
grid it describes.

`load`, `validate` and `check` run when the Snakefile loads, before any job, so a typo fails in a second with
the file or key and the allowed values rather than hours later inside a training job.
"""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Iterator

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


def _violations(schema: dict, instance, prefix: str = "") -> list[str]:
    """One line per way `instance` breaks `schema`: the config key, the value and what is allowed."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: e.json_path)
    return [f"config key {(prefix + e.json_path[1:]).lstrip('.') or '(top level)'}: {e.message}" for e in errors]


def validate(config: dict, schema_path, files) -> None:
    """Raise ConfigError with one line per schema violation: its key, and the value and what is allowed.

    Snakemake's `validate` reports only the first violation and prints the schema below it, which for a
    top-level key is the whole schema. `files` are the config files merged into `config`, named in the error.
    """
    lines = _violations(yaml.safe_load(Path(schema_path).read_text(encoding="utf-8")), config)
    if lines:
        raise ConfigError(
            f"the config from {', '.join(map(str, files))} does not match {schema_path}:\n" + "\n".join(lines)
        )


def params_schema(fn, skip: int = 3) -> dict:
    """The schema of a registry entry's keyword parameters (after its first `skip`: an initializer's `pretrained,
    shape, rng`, a missing-row policy's `ctx`), read from its signature: each annotated type (`int`, `float`,
    `str`, `bool`), `Literal[...]` values and `Annotated[..., AtLeast(x)]` bound. Derived here because an
    extension's entry is known only once its file is loaded; checked by the same validator as the config file."""
    from embinit.layers.initializers import AtLeast

    hints, properties = typing.get_type_hints(fn, include_extras=True), {}
    for name in list(inspect.signature(fn).parameters)[skip:]:
        hint, rule = hints.get(name), {}
        if typing.get_origin(hint) is typing.Annotated:
            hint, *extras = typing.get_args(hint)
            rule |= {"minimum": x.value for x in extras if isinstance(x, AtLeast)}
        if typing.get_origin(hint) is typing.Literal:
            rule["enum"] = list(typing.get_args(hint))
        elif hint in JSON_TYPES:
            rule["type"] = JSON_TYPES[hint]
        properties[name] = rule
    return {"type": "object", "properties": properties}


JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}


def references(config: dict, registries: dict[str, dict]) -> Iterator[tuple[str, object, object]]:
    """Every name the config uses to refer to something defined elsewhere, as (key, name, what it must be in):
    blocks, tasks, sources, variants, remotes, and the registries' initializers, missing-row policies and
    position encodings."""
    inits, policies, blocks = registries["initializer"], registries["missing-row policy"], config["blocks"]
    lists = [("initializers", config["initializers"], inits), ("run_blocks", config["run_blocks"], blocks)]
    lists += [(f"blocks.{n}.initializers", b.get("initializers", []), inits) for n, b in blocks.items()]
    parts = {"blocks": blocks, "initializers": inits, "variants": config["variants"]}
    for key in ("table3", "figure1", "table9", "table10", "table11", "figure2"):  # the outputs that name runs
        lists += [(f"{key}.{part}", config[key].get(part, []), allowed) for part, allowed in parts.items()]
    for key, names, allowed in lists:
        yield from ((f"{key}[{i}]", name, allowed) for i, name in enumerate(names))
    yield from ((f"initializer_params.{n}", n, inits) for n in config["initializer_params"])
    yield "embeddings.missing", config["embeddings"]["missing"], policies
    yield from ((f"embeddings.missing_params.{n}", n, policies) for n in config["embeddings"]["missing_params"])
    for name, variant in config["variants"].items():
        yield f"variants.{name}.pos_encoding", variant["pos_encoding"], registries["position encoding"]
    for section in ("tasks", "sources"):
        for name, entry in config[section].items():
            for role, paths in entry["files"].items():
                key = f"{section}.{name}.files.{role}"
                if isinstance(paths, str):
                    yield key, paths, config["remotes"]
                else:  # a task's list of files, read one after another
                    yield from ((f"{key}[{i}]", path, config["remotes"]) for i, path in enumerate(paths))
    for name, block in blocks.items():
        yield f"blocks.{name}.task", block["task"], config["tasks"]
        yield from (
            (f"blocks.{name}.sources.{side}", s, config["sources"]) for side, s in block["sources"].items() if s
        )
    yield from ((f"{key}.block", config[key]["block"], blocks) for key in ("table3", "table4", "table6", "table10"))
    yield "table4.questions", config["table4"]["questions"], config["remotes"]
    yield from ((f"figure1.seeds.{n}", n, blocks) for n in config["figure1"].get("seeds", {}))
    t3 = config["table3"]
    yield from ((f"table3.seeds_by_variant.{v}", v, t3["variants"]) for v in t3.get("seeds_by_variant", {}))


def check(config: dict) -> None:
    """Raise ConfigError naming the key where the config's parts do not fit each other, which its schema cannot
    express: a name that refers to nothing defined, a registry entry's parameters, a block's sources, what a table
    needs of its block, attention heads against D.

    The `extensions` files are loaded first (embinit.extensions.load), so the names they register are allowed.
    """
    from embinit.extensions import ExtensionError, load as load_extensions, registries

    for i, path in enumerate(config.get("extensions") or []):
        try:
            load_extensions([path])
        except ExtensionError as e:
            raise ConfigError(f"config key extensions[{i}]: {e}") from None
    if config["mirror"] is not None and not Path(config["mirror"]).is_dir():
        raise ConfigError(f"config key mirror: directory {config['mirror']!r} does not exist")
    for key, name, allowed in references(config, registries()):
        _require(name, allowed, key)
    with_params = [
        ("initializer_params", config["initializer_params"], registries()["initializer"], 3),
        ("embeddings.missing_params", config["embeddings"]["missing_params"], registries()["missing-row policy"], 1),
    ]
    for section, by_name, registry, skip in with_params:
        for name, params in by_name.items():
            key, accepted = f"{section}.{name}", list(inspect.signature(registry[name]).parameters)[skip:]
            for param in params:
                _require(param, accepted, f"{key}.{param}")
            if lines := _violations(params_schema(registry[name], skip), params, key):
                raise ConfigError("\n".join(lines))
    for name in config["blocks"]:
        _check_block(config, name)
    _check_outputs(config)
    _check_heads(config)


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
    from embinit.runsheet import trained_blocks

    for name in trained_blocks(config):
        dim = dim_of(config, name)
        heads = heads_for(config["model"], dim)
        if dim % heads:
            key = f"model.heads_by_dim.{dim}" if dim in _heads_by_dim(config["model"]) else "model.heads"
            raise ConfigError(
                f"config key {key}: {heads} heads do not divide D = {dim} of block {name!r}; "
                f"set model.heads_by_dim.{dim} to a divisor of {dim}"
            )


def _check_block(config: dict, name: str) -> None:
    """A block has exactly its task's sides, one dimension, and a sub-word source only alone."""
    block, sides = config["blocks"][name], sides_of(config, name)
    if set(block["sources"]) != set(sides):
        raise ConfigError(
            f"config key blocks.{name}.sources: a {config['tasks'][block['task']]['kind']} task "
            f"needs exactly the sides {sides}, got {sorted(block['sources'])}"
        )
    used = [s for s in block["sources"].values() if s is not None]
    if not used and "dim" not in block:
        raise ConfigError(f"config key blocks.{name}: a block with no pre-trained source needs `dim` (its D)")
    dims = {config["sources"][s]["dim"] for s in used} | ({block["dim"]} if "dim" in block else set())
    if len(dims) > 1:
        raise ConfigError(
            f"config key blocks.{name}: its sources and `dim` give different dimensions {sorted(dims)}; d_model is shared"
        )
    subword = {s for s in used if config["sources"][s]["level"] == "subword"}
    if subword and (len(subword) > 1 or len(subword) != len(set(used))):
        raise ConfigError(f"config key blocks.{name}.sources: a sub-word source must be the only source of its block")


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
