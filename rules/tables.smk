# The paper's outputs. Statistics tables (2, 6, 8) read embedding layers; result tables read training runs.


def stats_entries(blocks, initializers):
    """Seed 0's encoder layer of each (block, initializer) pair, as embinit.stats expects.

    A block whose encoder has no source (multi30k_glove6b50d offline) reports its decoder layer instead.
    """
    entries = []
    for block in blocks:
        side, source = next((k, s) for k, s in config["blocks"][block]["sources"].items() if s is not None)
        for init in initializers_of(config, block):
            if init in initializers:
                entries.append({"block": block, "task": task_of(block), "family": config["blocks"][block]["family"],
                                "source": source, "side": side, "initializer": init,
                                "path": embedding_path(block, init, 0, side)})
    return entries


TABLE1_INITS = [i for i in INITIALIZERS if i != "Xavier_Pretrained"]

for _table, _inits in ((2, TABLE1_INITS), (8, ["Xavier_Pretrained"])):

    rule:
        name:
            f"table{_table}"
        input:
            [e["path"] for e in stats_entries(config["run_blocks"], _inits)],
        output:
            csv=f"{RES}/table{_table}.csv",
            md=f"{RES}/table{_table}.md",
        params:
            table=_table,
            entries=stats_entries(config["run_blocks"], _inits),
        localrule: True
        conda:
            PIPELINE_ENV
        script:
            "../workflow_scripts/stats_table.py"


rule table6:
    """Scale of the embedding layers against the position encoding (Xavier, GloVe, GloVe_Xavier; raw and x sqrt(D))."""
    input:
        **{
            init: embedding_path(config["table6"]["block"], init, 0, config["table6"]["side"])
            for init in ("Xavier", "Pretrained", "Pretrained_Xavier")
        },
    output:
        csv=f"{RES}/table6.csv",
        md=f"{RES}/table6.md",
    params:
        table=6,
        src=config["sources"][source_of(config["table6"]["block"], config["table6"]["side"])]["display"],
        pos_max_len=config["model"]["max_len"],
        pos_base=config["model"]["pos_base"],
    localrule: True
    conda:
        PIPELINE_ENV
    script:
        "../workflow_scripts/stats_table.py"
