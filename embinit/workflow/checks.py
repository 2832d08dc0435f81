"""The config's parts checked against each other and against the registries, which its schema cannot express: a
name that refers to nothing defined, a registry entry's parameters, a block's sources, what an output needs of its
blocks, attention heads against D. Run when the Snakefile loads, right after the schema (embinit.workflow.config.validate).
"""

from __future__ import annotations

import inspect
import re
import typing
from collections import Counter
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Iterator

from embinit.workflow.config import (
    ConfigError,
    dim_of,
    initializer_setting,
    initializers_of,
    lr_of,
    sides_of,
    tokenizer_of,
    validate,
    violations,
)
from embinit.models.config import heads_by_dim, heads_for
from embinit.workflow.extensions import ExtensionError, load as load_extensions, registries
from embinit.registry import Above, AtLeast, names_of
from embinit.identity.proofs import accepted_problems
from embinit.identity.training_code import code_digest
from embinit.training.placement import require_cuda
from embinit.layers.initializers import fits_dim, mapping_initializers
from embinit.workflow.outputs import OUTPUTS, generated_initializers, generated_variants, layer_recipe, variants_of
from embinit.workflow.runsheet import layer_sheet, run_sheet, trained_blocks


def _require(value, allowed, key: str) -> None:
    if value not in allowed:
        raise ConfigError(f"config key {key}: unknown name {value!r}; allowed: {', '.join(sorted(allowed)) or 'none'}")


def params_schema(fn, skip: int = 3) -> dict:
    """The schema of a registry entry's keyword parameters (after its first `skip`: an initializer's `pretrained,
    shape, rng`, a missing-row policy's `ctx`), read from its signature: each annotated type (`int`, `float`,
    `str`, `bool`), `Literal[...]` values and `Annotated[..., AtLeast(x)]` or `Above(x)` bound. Derived here because an
    extension's entry is known only once its file is loaded; checked by the same validator as the config file."""
    hints, properties = typing.get_type_hints(fn, include_extras=True), {}
    for name in list(inspect.signature(fn).parameters)[skip:]:
        hint, rule = hints.get(name), {}
        if typing.get_origin(hint) is typing.Annotated:
            hint, *extras = typing.get_args(hint)
            rule |= {"minimum": x.value for x in extras if isinstance(x, AtLeast)}
            rule |= {"exclusiveMinimum": x.value for x in extras if isinstance(x, Above)}
        if typing.get_origin(hint) is typing.Literal:
            rule["enum"] = list(typing.get_args(hint))
        elif hint in JSON_TYPES:
            rule["type"] = JSON_TYPES[hint]
        properties[name] = rule
    return {"type": "object", "properties": properties}


JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}


def references(config: dict, registries: dict[str, dict]) -> Iterator[tuple[str, object, object]]:
    """Every name the config uses to refer to something defined elsewhere, as (key, name, what it must be in):
    outputs, blocks, tasks, sources, variants, remotes, and the registries' initializers, missing-row policies,
    position encodings and batchings (`train.batching`, a variant's own); an initializer is a registry entry or a
    named setting (`initializer_params.<name>.entry`); a missing-row policy's parameter annotated `NameOf` (`focus`'s
    source and fallback), as set or by default.
    An output's config section (its name, e.g. `table3`) refers by its keys: `block(s)`, `initializers`, `variant(s)`,
    `seeds` (by block), `seeds_by_variant`, `seeds_by_initializer` (initializer -> variant), `controls` (block ->
    block, among its `blocks`) and `questions` (a remote)."""
    inits, policies, blocks = registries["initializer"], registries["missing-row policy"], config["blocks"]
    settings = [name for name, params in config["initializer_params"].items() if "entry" in params]
    named = [*inits, *settings]  # registry entries and the config's named settings
    sections = {name: config[name] for name in OUTPUTS if isinstance(config.get(name), dict)}
    lists = [("outputs", config["outputs"], OUTPUTS), ("initializers", config["initializers"], named)]
    lists += [("run_blocks", config["run_blocks"], blocks)]
    lists += [(f"blocks.{n}.initializers", b.get("initializers", []), named) for n, b in blocks.items()]
    parts = {"blocks": blocks, "initializers": named, "bases": inits, "variants": config["variants"]}
    for key, section in sections.items():
        lists += [(f"{key}.{part}", section.get(part, []), allowed) for part, allowed in parts.items()]
    for key, names, allowed in lists:
        yield from ((f"{key}[{i}]", name, allowed) for i, name in enumerate(names))
    for name, params in config["initializer_params"].items():  # a name not an entry's own says which entry it runs
        key = f"initializer_params.{name}"
        yield (f"{key}.entry", params["entry"], inits) if "entry" in params else (key, name, inits)
    yield "embeddings.missing", config["embeddings"]["missing"], policies
    yield from ((f"embeddings.missing_params.{n}", n, policies) for n in config["embeddings"]["missing_params"])
    named = {"sources": config["sources"], **registries}
    for n in dict.fromkeys([config["embeddings"]["missing"], *config["embeddings"]["missing_params"]]):
        for param, (mark, value) in names_of(policies[n], config["embeddings"]["missing_params"].get(n, {})).items():
            yield f"embeddings.missing_params.{n}.{param}", value, named[mark.what]
    yield "train.batching", config["train"]["batching"], registries["batching"]
    for name, variant in config["variants"].items():
        yield f"variants.{name}.pos_encoding", variant["pos_encoding"], registries["position encoding"]
        if "batching" in variant.get("train", {}):
            yield f"variants.{name}.train.batching", variant["train"]["batching"], registries["batching"]
    for section in ("tasks", "sources"):
        for name, entry in config[section].items():
            for role, paths in entry.get("files", {}).items():  # a hf_dataset task has none
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
    for key, section in sections.items():
        if "block" in section:
            yield f"{key}.block", section["block"], blocks
        if "variant" in section:
            yield f"{key}.variant", section["variant"], config["variants"]
        for block, other in section.get("controls", {}).items():
            yield f"{key}.controls.{block}", block, section["blocks"]
            yield f"{key}.controls.{block}", other, section["blocks"]
        if "questions" in section:
            yield f"{key}.questions", section["questions"], config["remotes"]
        seeds = section.get("seeds")
        yield from ((f"{key}.seeds.{n}", n, blocks) for n in (seeds if isinstance(seeds, dict) else {}))
        yield from (
            (f"{key}.seeds_by_variant.{v}", v, section["variants"]) for v in section.get("seeds_by_variant", {})
        )
        for init, seeds in section.get("seeds_by_initializer", {}).items():
            yield f"{key}.seeds_by_initializer.{init}", init, section.get("initializers", config["initializers"])
            for v in seeds if isinstance(seeds, dict) else {}:
                yield f"{key}.seeds_by_initializer.{init}.{v}", v, section.get("variants", ["base"])


def check(config: dict) -> None:
    """Raise ConfigError naming the key where the config's parts do not fit each other, which its schema cannot
    express: a name that refers to nothing defined, a registry entry's parameters, a block's sources, what a table
    needs of its block, attention heads against D.

    The `extensions` files are loaded first (embinit.workflow.extensions.load), so the names they register are allowed.
    """
    for i, path in enumerate(config.get("extensions") or []):
        try:
            load_extensions([path])
        except ExtensionError as e:
            raise ConfigError(f"config key extensions[{i}]: {e}") from None
    if config["mirror"] is not None and not Path(config["mirror"]).is_dir():
        raise ConfigError(f"config key mirror: directory {config['mirror']!r} does not exist")
    for key, name, allowed in references(config, registries()):
        _require(name, allowed, key)
    inits, policies = registries()["initializer"], registries()["missing-row policy"]
    for name, params in config["initializer_params"].items():
        if name in inits and initializer_setting(config, name)[0] != name:
            raise ConfigError(
                f"config key initializer_params.{name}.entry: {name!r} is the registry entry's own name; "
                f"a setting of {params['entry']!r} needs a name of its own"
            )
    settings = {n: initializer_setting(config, n) for n in config["initializer_params"]}  # name: (entry, params)
    fills = {n: (n, p) for n, p in config["embeddings"]["missing_params"].items()}
    with_params = [("initializer_params", settings, inits, 3), ("embeddings.missing_params", fills, policies, 1)]
    for section, by_name, registry, skip in with_params:
        for name, (entry, params) in by_name.items():
            key, accepted = f"{section}.{name}", list(inspect.signature(registry[entry]).parameters)[skip:]
            for param in params:
                _require(param, accepted, f"{key}.{param}")
            if lines := violations(params_schema(registry[entry], skip), params, key):
                raise ConfigError("\n".join(lines))
    for name in config["sources"]:
        _check_source(config, name)
    for name in config["blocks"]:
        _check_block(config, name)
    _check_block_initializers(config)
    _check_outputs(config)
    _check_controls(config)
    _check_sweeps(config)
    _check_datasets(config)
    _check_heads(config)
    _check_dims(config)
    _check_accepted_code(config)


def _check_accepted_code(config: dict) -> None:
    """Each training code digest the config accepts leads to today's through committed proofs that hold: a digest
    listed without one would keep records of code that may train otherwise."""
    if config["accepted_training_code"]:
        if problems := accepted_problems(config["accepted_training_code"], code_digest()):
            raise ConfigError("\n".join(problems))


def _check_outputs(config: dict) -> None:
    """An output in `outputs` needs the config sections it reads (Table 14's is in no config by default); one that
    reports BLEU or the decoder (Table 3, Figure 1, Table 11) needs translation blocks; one that reads a side's
    pre-trained layer (Tables 4, 6 and 10) needs a side with a source."""
    for i, name in enumerate(config["outputs"]):
        if missing := [s for s in OUTPUTS[name].sections if s not in config]:
            raise ConfigError(
                f"config key outputs[{i}]: {name} reads config section {missing[0]!r}, which the config lacks; add "
                "it (schemas/config.schema.yaml gives its keys)"
            )
    for name, out in OUTPUTS.items():
        section = config.get(name, {})
        blocks = section.get("blocks", [section["block"]] if "block" in section else [])
        if out.requires.translation:
            for i, block in enumerate(blocks):
                if config["tasks"][config["blocks"][block]["task"]]["kind"] != "translation":
                    key = f"{name}.blocks[{i}]" if "blocks" in section else f"{name}.block"
                    raise ConfigError(f"config key {key}: block {block!r} is not a translation block; {name} needs one")
        if out.requires.source:
            block, side = section["block"], section["side"]
            _require(side, sides_of(config, block), f"{name}.side")
            if config["blocks"][block]["sources"][side] is None:
                raise ConfigError(
                    f"config key {name}.side: the {side} of block {block!r} has no pre-trained source "
                    f"(blocks.{block}.sources.{side} is null); {name} needs one"
                )


def _trains_as(config: dict, block: str) -> dict:
    """What a block's runs share with those of the block its `controls` name: the same model on the same vocabulary."""
    cfg = config["blocks"][block]
    return {"task": cfg["task"], "tokenizer": tokenizer_of(config, block), "dim": dim_of(config, block),
            "lr": lr_of(config, block), "epochs": cfg["epochs"], "batch_size": cfg["batch_size"]}  # fmt: skip


def _check_controls(config: dict) -> None:
    """A section's `controls` (Table 14's) pair a block's runs with another block's Xavier and Pretrained_Xavier: the
    two must train the same model on the same vocabulary (a Xavier layer depends only on N, D, seed and side), and
    the other must have those runs at every seed of the block."""
    for name in OUTPUTS:
        for block, other in config.get(name, {}).get("controls", {}).items():
            key = f"config key {name}.controls.{block}"
            if other == block:
                raise ConfigError(f"{key}: a block's controls are its own runs by default; name another block")
            ours, theirs = _trains_as(config, block), _trains_as(config, other)
            if differ := [what for what in ours if ours[what] != theirs[what]]:
                what = differ[0]
                raise ConfigError(
                    f"{key}: block {block!r} has {what} {ours[what]!r}, its controls' block {other!r} "
                    f"{theirs[what]!r}; the two must train the same model on the same vocabulary"
                )
            missing = {"Xavier", "Pretrained_Xavier"} - set(initializers_of(config, other))
            if missing or config["blocks"][other]["seeds"] < config["blocks"][block]["seeds"]:
                raise ConfigError(
                    f"{key}: block {other!r} needs Xavier and Pretrained_Xavier runs at every seed of {block!r} "
                    f"({config['blocks'][block]['seeds']}); it lacks {', '.join(sorted(missing)) or 'seeds'}"
                )


def _check_sweeps(config: dict) -> None:
    """A sweep's names (Table 12's rescaled initializers, Table 13's lr variants) are new and its params fit its
    registry entry; the initializers a sweep in `outputs` names are its block's (it reuses their runs)."""
    inits = registries()["initializer"]
    for name, (entry, params) in generated_initializers(config).items():
        if name in inits or name in config["initializer_params"]:
            raise ConfigError(
                f"config key initializers: {name!r}, a sweep's initializer, is a registry entry or a name of "
                "initializer_params too"
            )
        if lines := violations(params_schema(inits[entry]), params, f"{entry}({name})"):
            raise ConfigError("\n".join(lines))
    for name in generated_variants(config):
        if name in config["variants"]:
            raise ConfigError(f"config key variants.{name}: the name of a sweep's variant (a learning rate); rename it")
    for key, out in OUTPUTS.items():  # of the sweeps asked for: a config that drops an initializer builds the rest
        if (out.selects.variants or out.selects.initializers) and key in config["outputs"]:
            section = config[key]
            for part in ("initializers", "bases"):
                for i, init in enumerate(section.get(part, [])):
                    _require(init, initializers_of(config, section["block"]), f"{key}.{part}[{i}]")


DATASET_FIELDS = {"translation": ["src", "tgt"], "classification": ["text", "label", "labels"]}


def _check_datasets(config: dict) -> None:
    """A task reads either raw files or a Hugging Face dataset, and its dataset names fields of its own kind and
    `labels` for exactly its classes."""
    for name, task in config["tasks"].items():
        hf = task["format"] == "hf_dataset"
        other = "files" if hf else "dataset"
        if other in task:
            reads = "a Hugging Face dataset (key dataset)" if hf else "raw files (key files)"
            raise ConfigError(f"config key tasks.{name}.{other}: format {task['format']} reads {reads}, not {other}")
        dataset = task.get("dataset", {})
        for kind, fields in DATASET_FIELDS.items():
            for field in fields:
                if kind != task["kind"] and field in dataset:
                    raise ConfigError(
                        f"config key tasks.{name}.dataset.{field}: a {kind} field in a {task['kind']} task; "
                        f"it names {', '.join(DATASET_FIELDS[task['kind']])}"
                    )
        labels = dataset.get("labels")
        if labels is not None and len(labels) != task["num_classes"]:
            raise ConfigError(
                f"config key tasks.{name}.dataset.labels: {len(labels)} values for num_classes = "
                f"{task['num_classes']}; list each class's label value once, in class order"
            )


def _check_block_initializers(config: dict) -> None:
    """A block that trains runs every initializer its list names, so each must be in the grid (`initializers`):
    one the grid lacks was left out of the block's runs unsaid. A block no output trains is not held to it (an
    overlay may shorten the grid to the blocks it runs)."""
    for name in trained_blocks(config):
        for i, init in enumerate(config["blocks"][name].get("initializers", [])):
            if init not in config["initializers"]:
                raise ConfigError(
                    f"config key blocks.{name}.initializers[{i}]: block {name!r} names initializer {init!r}, which "
                    f"the config's `initializers` list does not define ({', '.join(config['initializers'])}); add it "
                    "there or drop it from the block"
                )


def _check_heads(config: dict) -> None:
    """Attention splits d_model = D into equal heads; otherwise the first training job would fail."""
    for name in trained_blocks(config):
        dim = dim_of(config, name)
        heads = heads_for(config["model"], dim)
        if dim % heads:
            key = f"model.heads_by_dim.{dim}" if dim in heads_by_dim(config["model"]) else "model.heads"
            raise ConfigError(
                f"config key {key}: {heads} heads do not divide D = {dim} of block {name!r}; "
                f"set model.heads_by_dim.{dim} to a divisor of {dim}"
            )


def _check_source(config: dict, name: str) -> None:
    """A word-level vocabulary reads a sub-word (hf) source only through its `word_rows` policy, which needs the
    source's tokenizer file; a word source has no pieces to average."""
    source, key = config["sources"][name], f"config key sources.{name}"
    if source["format"] == "hf" and source["level"] == "word" and "word_rows" not in source:
        raise ConfigError(
            f"{key}: a word-level hf source needs `word_rows` (how a word's row is built from its pieces)"
        )
    if "word_rows" in source:
        if source["format"] != "hf" or source["level"] != "word":
            raise ConfigError(
                f"{key}.word_rows: builds a word vocabulary's rows from a sub-word source's pieces; it needs "
                f"format hf and level word, got format {source['format']} and level {source['level']}"
            )
        if "tokenizer" not in source["files"]:
            raise ConfigError(f"{key}.files: word_rows needs the source's tokenizer file (role `tokenizer`)")


def _check_dims(config: dict) -> None:
    """Every layer of a block whose `dim` differs from a side's source comes from an initializer that maps the
    source's d to D, or ignores the source: the block's initializers, and those its outputs' runs and layers name
    (the sweeps' included)."""
    runs = run_sheet(config, {})
    layers = layer_sheet(config, runs)
    layers = layers[layers.file == "layer"]
    pairs = {(b, i) for b in config["blocks"] for i in initializers_of(config, b)}
    pairs |= set(zip(runs.block, runs.initializer)) | set(zip(layers.block, layers.initializer))
    for block, init in sorted(pairs):
        entry, dim = layer_recipe(config, init)[0], dim_of(config, block)
        for side, source in config["blocks"][block]["sources"].items():
            d = config["sources"][source]["dim"] if source else dim
            if not fits_dim(entry, d, dim):
                maps = mapping_initializers()["reduce" if dim < d else "expand"]
                raise ConfigError(
                    f"config key blocks.{block}.dim: D = {dim}, but the {side} source {source!r} has d = {d} and "
                    f"initializer {init!r}{f' (entry {entry!r})' if entry != init else ''} takes its rows as they "
                    f"are; at this D the block runs only initializers that map d to D ({', '.join(maps) or 'none'}) "
                    "or ignore the source (Xavier)"
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
    dims = {config["sources"][s]["dim"] for s in used}
    if len(dims) > 1 and "dim" not in block:
        raise ConfigError(
            f"config key blocks.{name}: its sources have different dimensions {sorted(dims)} and d_model is shared; "
            "set the block's `dim` and run initializers that map a source's d to it"
        )
    subword = {s for s in used if config["sources"][s]["level"] == "subword"}
    if subword and (len(subword) > 1 or len(subword) != len(set(used))):
        raise ConfigError(f"config key blocks.{name}.sources: a sub-word source must be the only source of its block")
    runs = [
        f"{i}/seed{k}/{v}"
        for i in initializers_of(config, name)
        for k in range(block["seeds"])
        for v in variants_of(config)
    ]
    for option, patterns in block.get("speed_runs", {}).items():
        for j, pattern in enumerate(patterns):
            if not any(fnmatchcase(run, pattern) for run in runs):
                raise ConfigError(
                    f"config key blocks.{name}.speed_runs.{option}[{j}]: {pattern!r} names none of the block's runs "
                    "(<initializer>/seed<k>/<variant>)"
                )


def allowed_rules_exceeded(allowed, jobs) -> str | None:
    """The message for planned jobs of rules that `--allowed-rules` (`allowed`; empty: every rule) leaves out, else
    None: Snakemake plans them where an allowed job rebuilds their input, and this workflow's checkpoint rule makes it
    build the DAG from every rule."""
    planned = Counter(job.rule.name for job in jobs if job.output)  # a target rule such as `all` writes nothing
    beyond = sorted(set(planned) - set(allowed)) if allowed else []
    if not beyond:
        return None
    counts = ", ".join(f"{name} ({planned[name]})" for name in beyond)
    return (
        f"--allowed-rules {' '.join(sorted(allowed))}, but Snakemake planned jobs of other rules too: {counts}, as an "
        "allowed job rebuilds their inputs (e.g. a layer a run was trained from); nothing ran. Build those inputs "
        "first as targets of their own, then run again with the rules you meant"
    )


def check_local_device(config: dict) -> None:
    """Raise ConfigError now, before any job, when `train.device` names a CUDA device this machine's torch cannot use;
    for the workflow's main process when it runs the training jobs itself (not a cluster's, whose GPUs are on its
    nodes). The same words as the job's own check (embinit.training.device.require_cuda)."""
    setting = config["train"]["device"]
    if not setting.startswith("cuda"):
        return
    import torch  # here: parsing the workflow imports no torch (3 s) but to check a CUDA device

    try:
        require_cuda(setting, torch.device(setting))
    except RuntimeError as error:
        raise ConfigError(f"config key {error} (this machine runs the training jobs)") from None


def check_schema(config: dict, schema_path, files, overrides: dict) -> None:
    """embinit.workflow.config.validate over the merged config, naming --config among its sources when it was given, and
    saying so when a number or a boolean there arrived as text: Snakemake's --config parses a value nested in a
    mapping (`--config "blocks={b: {epochs: 2}}"`) as a string."""
    try:
        validate(config, schema_path, [*map(str, files), *(["--config"] if overrides else [])])
    except ConfigError as error:
        if overrides and re.search(r"'[^']*' is not of type '(integer|number|boolean)'", str(error)):
            raise ConfigError(
                f"{error}\n(a value quoted above may be --config's: Snakemake hands a value nested in a --config "
                "mapping to the workflow as text; set it in a --configfile instead)"
            ) from None
        raise
