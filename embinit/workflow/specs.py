"""What a layer, a run or an extraction depends on beyond its input files: the specs the workflow plans for a job
and the job records (embinit.identity.records), so a change to any of them reruns exactly the jobs it reaches."""

from __future__ import annotations


from embinit.workflow.config import dim_of, initializer_setting, lr_of, missing_setting, tokenizer_of
from embinit.identity.fingerprints import code_fingerprint
from embinit.layers.initializers import LayerSpec, fingerprint
from embinit.layers.missing import MISSING_POLICIES
from embinit.registry import names_of
from embinit.workflow.outputs import SPEED_OPTIONS, layer_recipe, speed_options, variant_settings, variants_of
from embinit.training import Placement
from embinit.training.spec import RunSpec
from embinit.identity.sources import Source
from embinit.registry import BATCHINGS, POSITION_ENCODINGS


def layer_spec(config: dict, block: str, init: str, seed: int, side: str) -> LayerSpec:
    """A layer's spec; `fingerprint` holds the initializer's params and code. A sweep's initializer (Table 12's
    Pretrained_Xavier_x4) runs its registry entry (Scaled) with its own params."""
    entry, params = layer_recipe(config, init)
    return LayerSpec(entry, params, fingerprint(entry, params), seed, dim_of(config, block), side)


def train_spec(config: dict, block: str, init: str, seed: int, variant: str, plotted: bool) -> RunSpec:
    """A run's spec, except where it runs (Placement). `plotted`: a figure draws its validation BLEU per epoch, which
    under `train.valid_bleu: auto` is what makes it decode the validation split every epoch. A sweep's variant
    (Table 13's lr3e-4) sets its own `lr`; a variant's `model` and `train` override those sections' keys (the
    recipe ablation's `model.init`, `train.batching`). A named setting of an initializer
    (`initializer_params.<name>.entry`) puts its entry and parameters in the run's identity; a name that is its
    entry's own adds nothing there (its layer's spec holds its parameters), so earlier runs keep their digests; so does
    a speed option (`train.compile`) that is off, and one that is on (for all runs, or the block's runs its
    `speed_runs` names) is named under `speed_options`; so does a built-in
    batching, and one of the user's (an extension file) puts its code under `batching_code`."""
    block_cfg, task = config["blocks"][block], config["tasks"][config["blocks"][block]["task"]]
    switches = variants_of(config)[variant]
    setting = config["train"]["valid_bleu"]
    entry, params = initializer_setting(config, init)
    run = {"block": block, "task": block_cfg["task"], "initializer": init, "seed": seed, "variant": variant}
    if entry != init:
        run |= {"initializer_entry": entry, "initializer_params": params}
    train = variant_settings(config, switches, "train")
    speed = {k: True for k in speed_options(config, block, init, seed, variant)}
    return RunSpec(
        kind=task["kind"],
        model=variant_settings(config, switches, "model"),
        train={k: v for k, v in train.items() if k not in Placement.CONFIG_KEYS + SPEED_OPTIONS},
        variant=switches,
        epochs=block_cfg["epochs"],
        batch_size=block_cfg["batch_size"],
        lr=switches.get("lr", lr_of(config, block)),
        seed=seed,
        valid_bleu=plotted if setting == "auto" else bool(setting),
        num_classes=task.get("num_classes"),
        tokenizer=tokenizer_of(config, block),
        languages=task["languages"],
        position_code=code_fingerprint(POSITION_ENCODINGS[switches["pos_encoding"]]),
        run=run,
        speed_options=speed or None,
        batching_code=batching_code(train["batching"]),
    )


def batching_code(name: str) -> str | None:
    """The code_fingerprint of a batching defined outside embinit, as an extension file's; None for a built-in one,
    whose code is part of the training code a run record names (`training_code`)."""
    fn = BATCHINGS[name]
    module = fn.module if isinstance(fn, Source) else fn.__module__  # a built-in's Source until it is imported
    return None if module.split(".")[0] == "embinit" else code_fingerprint(fn)


def missing_code(config: dict) -> str:
    """The code of the missing-row policy extraction uses (its rerun trigger), with that of the policies its
    parameters name (`focus`'s fallback)."""
    missing, params = missing_setting(config)
    fn = MISSING_POLICIES[missing]
    named = [MISSING_POLICIES[v] for mark, v in names_of(fn, params).values() if mark.what == MISSING_POLICIES.kind]
    return code_fingerprint(fn, *named)
