# Paths and input functions shared by every rule file. Names follow docs/design.md.
import json
import os
import re

from embinit.config import dim_of, initializers_of, seeds_of, sides_of, tokenizer_of, valid_bleu_of

# Jobs import the embinit package from this checkout, also inside --sdm conda environments and on cluster nodes.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")]))

PIPELINE_ENV = "../envs/pipeline.yaml"
DATA = config["data_dir"]
RES = config["results_dir"]


def _choice(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    block=_choice(config["blocks"]),
    side="encoder|decoder",
    seed=r"\d+",
    variant=_choice(config["variants"]),


def raw(relpath):
    return f"{DATA}/raw/{relpath}"


def task_of(block):
    return config["blocks"][block]["task"]


def source_of(block, side):
    return config["blocks"][block]["sources"][side]


def tokenizer_file(block):
    """The tokenizer file a sub-word block needs, as a raw path (None for spaCy blocks)."""
    tok = tokenizer_of(config, block)
    return None if tok == "spacy" else raw(config["sources"][tok]["files"]["tokenizer"])


def vocab_path(block, side):
    return f"{DATA}/vocab/{task_of(block)}/{tokenizer_of(config, block)}/{side}.parquet"


def tokenized_path(block, split):
    return f"{DATA}/tokenized/{task_of(block)}/{tokenizer_of(config, block)}/{split}.parquet"


def splits_of_task(task):
    from embinit.data.prepare import splits_of

    return splits_of(config["tasks"][task]["format"])


def vocabulary_targets(blocks):
    return sorted({vocab_path(b, side) for b in blocks for side in sides_of(config, b)})
