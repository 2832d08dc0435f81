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
    """The outputs config `outputs` names, for the configured run_blocks."""
    input:
        rules.paper.input,


rule vocabularies:
    """Tokenized splits and vocabularies of the run_blocks."""
    input:
        vocabulary_targets(config["run_blocks"]),


onsuccess:
    print(f"\nDone. Tables (CSV for code, Markdown to read) are in {RES}/: " + ", ".join(config["outputs"]) + ".")
    print(f"Start with {RES}/paper_comparison.md (ours beside the paper's, finding by finding).")
    print(
        "Next: the full offline run, --configfile config/offline-cpu.yaml (about an hour on 2 cores), or the "
        "paper's grid with internet and a GPU: snakemake --profile profiles/slurm results/table1.csv"
    )
