# Reproduction of "On Initializing Transformers with Pre-trained Embeddings" (arXiv 2407.12514).
# Stages: download -> prepare (splits, vocabularies) -> embeddings (extract, initialize) -> train -> tables.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: f"{workflow.basedir}/config.yaml"


validate(config, "schemas/config.schema.yaml")

from embinit.config import check

check(config)


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/download.smk"
include: "rules/prepare.smk"
include: "rules/embeddings.smk"
include: "rules/train.smk"
include: "rules/analogy.smk"
include: "rules/tables.smk"


rule all:
    """Every table and the figure of the configured run_blocks."""
    input:
        rules.paper.input,


rule vocabularies:
    """Tokenized splits and vocabularies of the run_blocks."""
    input:
        vocabulary_targets(config["run_blocks"]),
