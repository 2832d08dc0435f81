"""The configuration: loading, schema validation, and the questions about the grid it describes (a block's sides,
dimension, tokenizer, learning rate, initializers and seeds). The checks across its parts are embinit.checks.

`load` and `validate` run when the Snakefile loads, before any job, so a typo fails in a second with the file or
key and the allowed values rather than hours later inside a training job.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml


class ConfigError(ValueError):
    pass


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


def violations(schema: dict, instance, prefix: str = "") -> list[str]:
    """One line per way `instance` breaks `schema`: the config key, the value and what is allowed."""
    import jsonschema  # here, not at the top: the models import this module, also where jsonschema is absent (a GPU image)

    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: e.json_path)
    return [f"config key {(prefix + e.json_path[1:]).lstrip('.') or '(top level)'}: {e.message}" for e in errors]


def validate(config: dict, schema_path, files) -> None:
    """Raise ConfigError with one line per schema violation: its key, and the value and what is allowed.

    Snakemake's `validate` reports only the first violation and prints the schema below it, which for a
    top-level key is the whole schema. `files` are the config files merged into `config`, named in the error.
    """
    lines = violations(yaml.safe_load(Path(schema_path).read_text(encoding="utf-8")), config)
    if lines:
        raise ConfigError(
            f"the config from {', '.join(map(str, files))} does not match {schema_path}:\n" + "\n".join(lines)
        )


def task_sides(config: dict, task: str) -> list[str]:
    """The stacks a task's model has: a translator's encoder and decoder, a classifier's encoder."""
    return ["encoder", "decoder"] if config["tasks"][task]["kind"] == "translation" else ["encoder"]


def evaluated_splits(config: dict, task: str) -> list[str]:
    """The splits a translation task scores BLEU on (its references); none for classification."""
    return ["valid", "test"] if config["tasks"][task]["kind"] == "translation" else []


def sides_of(config: dict, block: str) -> list[str]:
    return task_sides(config, config["blocks"][block]["task"])


def tokenizer_of(config: dict, block: str) -> str:
    """`spacy` for word-level blocks, else the sub-word source whose tokenizer the block uses."""
    for source in config["blocks"][block]["sources"].values():
        if source is not None and config["sources"][source]["level"] == "subword":
            return source
    return "spacy"


def lr_of(config: dict, block: str) -> float:
    """The block's `lr` when it sets one, else its task's (the paper's rate per task): a stand-in of another width
    may need its own rate to converge in the epochs it is given."""
    block_cfg = config["blocks"][block]
    return block_cfg.get("lr", config["tasks"][block_cfg["task"]]["lr"])


def heads_by_dim(model_cfg: dict) -> dict[int, int]:
    return {int(k): v for k, v in (model_cfg.get("heads_by_dim") or {}).items()}


def heads_for(model_cfg: dict, dim: int) -> int:
    """`model.heads`, unless `model.heads_by_dim` names this D (the paper uses 10 heads for D = 300)."""
    return heads_by_dim(model_cfg).get(dim, model_cfg["heads"])


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


def raw_files(config: dict, blocks) -> list[str]:
    """Every raw file (remote relpath) the blocks need: their tasks' data and their sources' files."""
    paths = set()
    for block in blocks:
        for files in config["tasks"][config["blocks"][block]["task"]]["files"].values():
            paths.update([files] if isinstance(files, str) else files)  # a role may name a list
        paths.update(
            f for s in config["blocks"][block]["sources"].values() if s for f in config["sources"][s]["files"].values()
        )
    return sorted(paths)


def scaled_initializers(section: dict) -> dict[str, dict]:
    """Table 12's initializers by name, each {base, k}: the base at k = 1 (the block's own runs, reused), else
    <base>_x<k> (e.g. Pretrained_Xavier_x4), the base's layer times k (initializer Scaled)."""
    return {
        (base if k == 1 else f"{base}_x{k:g}"): {"base": base, "k": float(k)}
        for base in section["bases"]
        for k in section["scales"]
    }


def lr_variants(config: dict) -> dict[str, float]:
    """Table 13's variant of each learning rate: `base` for its block's own (those runs are reused), lr<rate> (e.g.
    lr3e-4) for the others."""
    t13 = config["table13"]
    own = lr_of(config, t13["block"])
    return {
        ("base" if lr == own else "lr" + np.format_float_scientific(lr, trim="-", exp_digits=1)): lr for lr in t13["lr"]
    }
