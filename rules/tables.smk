# The paper's outputs. Statistics tables (2, 6, 8) read embedding layers; result tables read training runs.


def stats_entries(blocks, initializers):
    """Seed 0's encoder layer of each (block, initializer) pair, as embinit.reports.statistics expects.

    A block whose encoder has no source (multi30k_glove6b50d offline) reports its decoder layer instead.
    """
    entries = []
    for block in blocks:
        side, source = next((k, s) for k, s in config["blocks"][block]["sources"].items() if s is not None)
        for init in initializers_of(config, block):
            if init in initializers:
                entries.append(
                    {
                        "block": block,
                        "task": task_of(block),
                        "family": config["blocks"][block]["family"],
                        "source": source,
                        "side": side,
                        "initializer": init,
                        "path": embedding_path(block, init, 0, side),
                    }
                )
    return entries


# Table 2 leaves out _Shuffled: "identical distribution to Pre-trained" (the paper omits those rows).
TABLE2_INITS = [i for i in INITIALIZERS if i not in ("Xavier_Pretrained", "Pretrained_Shuffled")]

for _table, _inits in ((2, TABLE2_INITS), (8, ["Xavier_Pretrained"])):

    rule:
        name:
            f"table{_table}"
        input:
            [e["path"] for e in stats_entries(config["run_blocks"], _inits)],
        output:
            csv=report(f"{RES}/table{_table}.csv", caption=f"../report/table{_table}.rst", category="Tables"),
            md=f"{RES}/table{_table}.md",
        localrule: True
        conda:
            PIPELINE_ENV
        params:
            table=_table,
            entries=stats_entries(config["run_blocks"], _inits),
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
        csv=report(f"{RES}/table6.csv", caption="../report/table6.rst", category="Tables"),
        md=f"{RES}/table6.md",
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        table=6,
        src=config["sources"][source_of(config["table6"]["block"], config["table6"]["side"])]["display"],
        pos_rows=config["table6"]["pos_rows"],
        pos_base=config["model"]["pos_base"],
    script:
        "../workflow_scripts/stats_table.py"


for _table, _runs in (
    (1, lambda: base_runs(config["run_blocks"])),
    (7, lambda: base_runs(blocks_running("Xavier_Pretrained"), ["Xavier", "Xavier_Pretrained"])),
    (5, lambda: base_runs(config["run_blocks"])),
):

    rule:
        name:
            f"table{_table}"
        input:
            _runs(),
        output:
            csv=report(f"{RES}/table{_table}.csv", caption=f"../report/table{_table}.rst", category="Tables"),
            md=f"{RES}/table{_table}.md",
        localrule: True
        conda:
            PIPELINE_ENV
        params:
            table=str(_table),
        script:
            "../workflow_scripts/tables.py"


rule table3:
    """Multi30k GloVe: initializers x embedding trainable yes/no x position encoding yes/no."""
    input:
        [
            f"{run_dir(config['table3']['block'], i, s, v)}/final.json"
            for i in config["table3"]["initializers"]
            for v in config["table3"]["variants"]
            for s in seeds_of(config, config["table3"]["block"])[: config["table3"].get("seeds")]
        ],
    output:
        csv=report(f"{RES}/table3.csv", caption="../report/table3.rst", category="Tables"),
        md=f"{RES}/table3.md",
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        table="3",
        settings=json.dumps(config["table3"], sort_keys=True),
    script:
        "../workflow_scripts/tables.py"


FIGURE1_RUNS = base_runs(
    config["figure1"]["blocks"], config["figure1"]["initializers"], seeds=config["figure1"].get("seeds", {})
)


rule figure1:
    """Validation BLEU per epoch, mean and one sigma over seeds, one panel per block."""
    input:
        runs=FIGURE1_RUNS,
        metrics=[p.replace("final.json", "metrics.parquet") for p in FIGURE1_RUNS],
    output:
        png=report(f"{RES}/figure1.png", caption="../report/figure1.rst", category="Figure 1"),
        csv=f"{RES}/figure1.csv",
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        table="figure1",
        settings=json.dumps(config["figure1"], sort_keys=True),
    script:
        "../workflow_scripts/tables.py"


def output_path(name):
    """The file that stands for an entry of config `outputs`."""
    return f"{RES}/{name}.png" if name == "figure1" else f"{RES}/{name}.csv"


rule paper:
    """The outputs config `outputs` names (all tables and the figure, by default) for the configured run_blocks."""
    input:
        [output_path(name) for name in config["outputs"]],
    localrule: True
