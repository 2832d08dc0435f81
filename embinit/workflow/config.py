"""The configuration: loading, schema validation, and the questions about the grid it describes (a block's sides,
dimension, tokenizer, learning rate, initializers and seeds). The checks across its parts are embinit.workflow.checks.

`load` and `validate` run when the Snakefile loads, before any job, so a typo fails in a second with the file or
key and the allowed values rather than hours later inside a training job.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml

if TYPE_CHECKING:  # imported where used: the models import this module, also where jsonschema is absent
    import jsonschema


class ConfigError(ValueError):
    pass


# libyaml's parser where PyYAML has it (the same documents, about 10x faster: every snakemake start reads
# config.yaml and the schema), else PyYAML's own
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path) -> dict:
    """The mapping a YAML config file holds. Snakemake's own error for an empty or unparsable file names no file."""
    with open(path, "rb") as f:  # bytes, so that undecodable text is a YAMLError naming the file too
        try:
            data = yaml.load(f, Loader=_LOADER)
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML:\n{e}") from None
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"config file {path} is {what}; it must map config keys to values")
    return data


def _strict(validator_class):
    """`validator_class` with JSON Schema's `integer` narrowed to Python's int: JSON Schema counts 1.0 as an
    integer, but `epochs: 1.0` reaches the training loop as a float and fails there (range(1.0))."""
    import jsonschema

    integer = validator_class.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(validator_class, type_checker=integer)


# A number in exponent form without a point or without the exponent's sign: YAML 1.1 (PyYAML, Snakemake) reads it
# as text, YAML 1.2 as a float
_YAML11_TEXT_FLOAT = re.compile(r"([-+]?)(\d+)(?:\.(\d*))?[eE]([-+]?)(\d+)")


def _hint(error: jsonschema.ValidationError) -> str:
    """What to write instead, where a type error has a likely cause: a whole number written as a float, or a
    float YAML 1.1 reads as text (`lr: 1e-3`)."""
    if error.validator != "type":
        return ""
    types, value = error.validator_value, error.instance
    wanted = set(types) if isinstance(types, list) else {types}
    if "integer" in wanted and isinstance(value, float) and value.is_integer():
        return f" (write {int(value)}: a point makes it a float)"
    if wanted & {"number", "integer"} and isinstance(value, str):
        if match := _YAML11_TEXT_FLOAT.fullmatch(value.strip()):
            sign, whole, fraction, exp_sign, exponent = match.groups()
            number = f"{sign}{whole}.{fraction or 0}e{exp_sign or '+'}{exponent}"
            return f" (YAML 1.1 reads {value} as text, not a number: write {number})"
    return ""


def violations(schema: dict, instance, prefix: str = "") -> list[str]:
    """One line per way `instance` breaks `schema`: the config key, the value and what is allowed, and what to
    write instead where the cause is likely (embinit.workflow.config._hint)."""
    import jsonschema

    validator = _strict(jsonschema.validators.validator_for(schema))(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: e.json_path)
    return [
        f"config key {(prefix + e.json_path[1:]).lstrip('.') or '(top level)'}: {e.message}{_hint(e)}" for e in errors
    ]


def validate(config: dict, schema_path, files) -> None:
    """Raise ConfigError with one line per schema violation: its key, and the value and what is allowed.

    Snakemake's `validate` reports only the first violation and prints the schema below it, which for a
    top-level key is the whole schema. `files` are the config files merged into `config`, named in the error.
    """
    lines = violations(yaml.load(Path(schema_path).read_text(encoding="utf-8"), Loader=_LOADER), config)
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


def dim_of(config: dict, block: str) -> int:
    """D of a block: its own `dim` when it sets one (a Xavier-only block must; a source of another d then needs an
    initializer that maps d to D, embinit.workflow.checks), else its sources' dimension."""
    block_cfg = config["blocks"][block]
    if "dim" in block_cfg:
        return block_cfg["dim"]
    return config["sources"][next(s for s in block_cfg["sources"].values() if s is not None)]["dim"]


def initializer_setting(config: dict, name: str) -> tuple[str, dict]:
    """The registry entry and parameters an initializer name runs: `initializer_params.<name>`, whose `entry`
    (default: the name itself) picks the function and whose other keys are its parameters, so one entry serves
    several named settings (`Pretrained_Gaussian_xavier: {entry: Pretrained_Gaussian, scale: xavier}`)."""
    params = dict(config["initializer_params"].get(name, {}))
    return params.pop("entry", name), params


def missing_setting(config: dict) -> tuple[str, dict]:
    """The missing-row policy extraction runs and its parameters (`embeddings.missing`, its `missing_params`)."""
    missing = config["embeddings"]["missing"]
    return missing, config["embeddings"]["missing_params"].get(missing, {})


def initializers_of(config: dict, block: str) -> list[str]:
    """The block's own list when it has one, else all of the configured initializers, in the configured order (a
    block's names are among those: embinit.workflow.checks)."""
    wanted = config["blocks"][block].get("initializers", config["initializers"])
    return [i for i in config["initializers"] if i in wanted]


def seeds_of(config: dict, block: str) -> list[int]:
    return list(range(config["blocks"][block]["seeds"]))


def _hub_checkpoint_names(source: dict) -> dict[str, str]:
    """role -> file name in the repository of a `format: hf_checkpoint` source."""
    names = {"config": "config.json", "tokenizer": source["tokenizer"]}
    return names | {("weights" if i == 0 else f"weights_{i + 1}"): name for i, name in enumerate(source["weights"])}


def hub_checkpoint_files(source: dict) -> dict[str, str]:
    """The files (role -> relpath) a `format: hf_checkpoint` source reads: its repository's config.json, each of its
    `weights` (roles weights, weights_2, ...) and its `tokenizer`, at huggingface/<hub_id>/<file> as the hub
    sources of config.yaml are."""
    return {role: f"huggingface/{source['hub_id']}/{name}" for role, name in _hub_checkpoint_names(source).items()}


HUB_CHECKPOINT_KEYS = {"revision", "weights", "tokenizer"}  # a source's keys that only hf_checkpoint takes


def add_hub_checkpoints(config: dict) -> None:
    """Give each hf_checkpoint source its `files`, and each file a `remotes` entry unless the config has one: its
    hub URL at the source's `revision` (default main), its sha256 recorded in remotes_lock at the first fetch."""
    for name, source in config["sources"].items():
        if source["format"] != "hf_checkpoint":
            for key in HUB_CHECKPOINT_KEYS & set(source):
                raise ConfigError(f"config key sources.{name}.{key}: only a format hf_checkpoint source takes it")
            continue
        files = hub_checkpoint_files(source)
        if source.setdefault("files", files) != files:
            raise ConfigError(
                f"config key sources.{name}.files: a hf_checkpoint source's files follow from its hub_id, weights and "
                f"tokenizer ({files}); leave `files` out"
            )
        revision = urllib.parse.quote(source.get("revision", "main"), safe="")
        for role, file in _hub_checkpoint_names(source).items():
            url = f"https://huggingface.co/{source['hub_id']}/resolve/{revision}/{file}"
            config["remotes"].setdefault(files[role], {"url": url, "sha256": None})


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
