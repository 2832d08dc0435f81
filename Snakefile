# Reproduction of "On Initializing Transformers with Pre-trained Embeddings" (arXiv 2407.12514).
# Stages: download -> prepare (splits, vocabularies) -> embeddings (extract, initialize) -> train -> tables.
from snakemake.utils import min_version

from embinit.config import check, load, validate

min_version("9.0")

# Each error names its file or key, before any job. (--configfile files are parsed by snakemake's command line
# before this file runs; an empty or unparsable one fails there.)
load(f"{workflow.basedir}/config.yaml")


configfile: f"{workflow.basedir}/config.yaml"


validate(config, f"{workflow.basedir}/schemas/config.schema.yaml", workflow.configfiles)
check(config)


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/download.smk"
include: "rules/prepare.smk"
include: "rules/embeddings.smk"
include: "rules/train.smk"
include: "rules/analogy.smk"
include: "rules/tables.smk"
include: "rules/comparison.smk"


rule all:
    """Every table and the figure of the configured run_blocks."""
    input:
        rules.paper.input,


rule vocabularies:
    """Tokenized splits and vocabularies of the run_blocks."""
    input:
        vocabulary_targets(config["run_blocks"]),
