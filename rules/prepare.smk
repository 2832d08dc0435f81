# Parquet splits per task, then tokenized splits and vocabularies per (task, tokenizer).
# One rule per task, because each task has its own set of splits and sides.
from embinit.data.prepare import splits_of
from embinit.data.vocab import SPLIT_LAYOUT

for _task, _tcfg in config["tasks"].items():

    rule:
        name:
            f"prepare_{_task}"
        input:
            **{role: raw(path) for role, path in _tcfg["files"].items()},
        output:
            **{s: f"{DATA}/prepared/{_task}/{s}.parquet" for s in splits_of(_tcfg["format"])},
        log:
            f"{DATA}/logs/prepare/{_task}.log",
        conda:
            PIPELINE_ENV
        params:
            fmt=_tcfg["format"],
        script:
            "../workflow_scripts/prepare.py"

    _sides = ["encoder", "decoder"] if _tcfg["kind"] == "translation" else ["encoder"]

    rule:
        name:
            f"vocab_{_task}"
        input:
            **{s: f"{DATA}/prepared/{_task}/{s}.parquet" for s in splits_of(_tcfg["format"])},
            tokenizer_file=lambda wc: (
                [] if wc.tokenizer == "spacy" else raw(config["sources"][wc.tokenizer]["files"]["tokenizer"])
            ),
        output:
            **{f"vocab_{side}": f"{DATA}/vocab/{_task}/{{tokenizer}}/{side}.parquet" for side in _sides},
            **{f"ids_{s}": f"{DATA}/tokenized/{_task}/{{tokenizer}}/{s}.parquet" for s in splits_of(_tcfg["format"])},
        log:
            f"{DATA}/logs/vocab/{_task}/{{tokenizer}}.log",
        wildcard_constraints:
            tokenizer=_choice(["spacy", *config["sources"]]),
        conda:
            PIPELINE_ENV
        resources:
            mem_mb=8000,
        params:
            kind=_tcfg["kind"],
            languages=_tcfg["languages"],
            min_freq=_tcfg["min_freq"],
            splits=splits_of(_tcfg["format"]),
            sides=_sides,
            layout=SPLIT_LAYOUT,  # a new column layout of the tokenized splits rebuilds them
        script:
            "../workflow_scripts/build_vocab.py"
