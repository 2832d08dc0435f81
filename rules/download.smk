# Raw files: the mirror directory first, else the canonical remote; checksum-verified, written atomically.
from embinit.data.fetch import FetchSettings


rule fetch:
    output:
        f"{DATA}/raw/{{relpath}}",
    log:
        f"{DATA}/logs/fetch/{{relpath}}.log",
    wildcard_constraints:
        relpath=_choice(config["remotes"]),
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        remote=lambda wc: config["remotes"][wc.relpath],
        # an object, which Snakemake leaves out of its rerun trigger: a new mirror or timeout refetches nothing
        # (the lock file is no input for the same reason; fetch reads it, and retries network errors itself)
        settings=FetchSettings.from_config(config),
    script:
        "../workflow_scripts/fetch.py"


def raw_inputs(blocks):
    """Every raw file the blocks need: their tasks' data and their sources' files."""
    paths = set()
    for block in blocks:
        paths.update(config["tasks"][task_of(block)]["files"].values())
        for source in config["blocks"][block]["sources"].values():
            if source is not None:
                paths.update(config["sources"][source]["files"].values())
    return sorted(raw(p) for p in paths)


rule prefetch:
    """Fetch everything the run_blocks (and Table 4) need, e.g. on a login node before a cluster run."""
    input:
        raw_inputs(config["run_blocks"]),
        raw(config["table4"]["questions"]),
    localrule: True
