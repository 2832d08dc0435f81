# Stage 1, data (embinit/data): raw files (mirror first, else the canonical remote; checksum-verified), Parquet
# splits per task, then tokenized splits, vocabularies and BLEU's references per (task, tokenizer).
import os
import re

from embinit.data.fetch import FetchSettings, archive_members, check_cached
from embinit.workflow.config import evaluated_splits, task_sides
from embinit.data.vocab import SPLIT_LAYOUT
from embinit.workflow.runsheet import fetched_raw
from embinit.workflow.paths import fill

# Where a fetch looks and how it waits: an object, which Snakemake leaves out of its rerun trigger, so a new mirror or
# timeout refetches nothing (the lock file is no input for the same reason; fetch reads it, and retries network errors)
FETCH = FetchSettings.from_config(config)

# A cached raw file that changed since its fetch (cut, edited) stops the run here, before any job reads it.
if workflow.is_main_process:
    for _relpath, _remote in config["remotes"].items():
        check_cached(_relpath, _remote, W.raw(_relpath), FETCH)


# Members of one archive (the 16 IWSLT2017 files of de-en.zip) come from one job: one download, one read of the zip.
ARCHIVES = archive_members(config["remotes"])


rule fetch:
    output:
        P.raw,
    log:
        fill(P.data_log, stage="fetch", name="{relpath}"),
    wildcard_constraints:
        relpath=_choice(set(config["remotes"]).difference(*ARCHIVES.values())),
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        remotes=lambda wc: {wc.relpath: config["remotes"][wc.relpath]},
        settings=FETCH,
    script:
        "../workflow_scripts/fetch.py"


for _url, _members in ARCHIVES.items():
    _folder = os.path.commonpath(_members)

    rule:
        name:
            re.sub(r"\W", "_", f"fetch_{_folder}")
        output:
            [W.raw(rel) for rel in _members],
        log:
            fill(P.data_log, stage="fetch", name=os.path.join(_folder, os.path.basename(_url))),
        localrule: True
        conda:
            PIPELINE_ENV
        params:
            remotes={rel: config["remotes"][rel] for rel in _members},
            settings=FETCH,
        script:
            "../workflow_scripts/fetch.py"


# The remotes of every raw file the jobs of config `outputs` fetch (the DAG of `all`), by relpath: what prefetch and
# preflight cover (tests/test_preflight.py compares them with each shipped config's dry run).
NEEDED_REMOTES = {rel: config["remotes"][rel] for rel in fetched_raw(config, W.runs, W.layers)}


# prefetch: every raw file the outputs need, e.g. on a login node, each failure listed at the end; preflight: one
# table of them (hash, cached copy, mirror hit, what the remote says), no download
for _name, _log in (("prefetch", "summary"), ("preflight", "table")):

    rule:
        name:
            _name
        log:
            fill(P.data_log, stage=_name, name=_log),
        localrule: True
        conda:
            PIPELINE_ENV
        params:
            remotes=NEEDED_REMOTES,
            raw_dir=W.raw(""),
            settings=FETCH,
        script:
            f"../workflow_scripts/{_name}.py"


# One rule per task, because each task has its own set of splits and sides.
for _task, _tcfg in config["tasks"].items():

    rule:
        name:
            f"prepare_{_task}"
        input:
            **{role: expand(P.raw, relpath=paths) for role, paths in _tcfg.get("files", {}).items()},
            **W.dataset_folder(_task),
        output:
            **{s: fill(P.prepared, task=_task, split=s) for s in W.task_splits(_task)},
        log:
            fill(P.data_log, stage="prepare", name=_task),
        conda:
            PIPELINE_ENV
        resources:
            **CPU_JOB,
        params:
            **W.prepare_params(_task),
            fmt=_tcfg["format"],
        script:
            "../workflow_scripts/prepare.py"

    rule:
        name:
            f"vocab_{_task}"
        input:
            unpack(vocab_inputs(_task)),
        output:
            **{f"vocab_{side}": fill(P.vocab, task=_task, side=side) for side in task_sides(config, _task)},
            **{f"ids_{s}": fill(P.tokenized, task=_task, split=s) for s in W.task_splits(_task)},
            **({"detokenizer": fill(P.detokenizer, task=_task)} if evaluated_splits(config, _task) else {}),
            **{f"references_{s}": fill(P.references, task=_task, split=s) for s in evaluated_splits(config, _task)},
        log:
            fill(P.data_log, stage="vocab", name=f"{_task}/{{tokenizer}}"),
        wildcard_constraints:
            tokenizer=_choice(["spacy", *config["sources"]]),
        conda:
            PIPELINE_ENV
        resources:
            **CPU_JOB,
            mem_mb=8000,
        params:
            kind=_tcfg["kind"],
            languages=_tcfg["languages"],
            min_freq=_tcfg["min_freq"],
            splits=W.task_splits(_task),
            sides=task_sides(config, _task),
            evaluated=evaluated_splits(config, _task),
            layout=SPLIT_LAYOUT,  # a new column layout of the tokenized splits rebuilds them
        script:
            "../workflow_scripts/build_vocab.py"
