# Stage 5, reports (embinit/reports): statistics tables (2, 6, 8) read embedding layers; Table 4 a pre-trained
# layer; result tables (1, 3, 5, 7) and Figure 1 read training runs; paper_comparison reads the tables built.


for _table, _inits in STATS_TABLES.items():

    rule:
        name:
            f"table{_table}"
        input:
            [e["path"] for e in stats_entries(config["run_blocks"], _inits)],
        output:
            csv=report(output_path(f"table{_table}"), caption=f"../report/table{_table}.rst", category="Tables"),
            md=fill(TABLE_MD, name=f"table{_table}"),
        log:
            fill(REPORTS_LOG, name=f"table{_table}"),
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
        **table6_layers(),
    output:
        csv=report(output_path("table6"), caption="../report/table6.rst", category="Tables"),
        md=fill(TABLE_MD, name="table6"),
    log:
        fill(REPORTS_LOG, name="table6"),
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        table=6,
        family=config["blocks"][config["table6"]["block"]]["family"],
        src=config["sources"][source_of(config["table6"]["block"], config["table6"]["side"])]["display"],
        pos_rows=config["table6"]["pos_rows"],
        pos_base=config["model"]["pos_base"],
    script:
        "../workflow_scripts/stats_table.py"


# Table 4: 3CosAdd word analogy on a block's pre-trained (GloVe) layer under the paper's seven transformations,
# and (beyond the paper) the same table for several numbers of rows of P drawn from.
for _table in ("table4", "table4_sensitivity"):

    rule:
        name:
            _table
        input:
            vectors=table4_layer(PRETRAINED),
            tokens=table4_layer(PRETRAINED_TOKENS),
            questions=raw(config["table4"]["questions"]),
        output:
            csv=report(output_path(_table), caption=f"../report/{_table}.rst", category="Tables"),
            md=fill(TABLE_MD, name=_table),
        log:
            fill(REPORTS_LOG, name=_table),
        conda:
            PIPELINE_ENV
        resources:
            **CPU_JOB,
            mem_mb=4000,
        params:
            config=report_config("table4"),  # a changed seed, pos_enc, pos_rows or sensitivity_rows rebuilds it
        script:
            "../workflow_scripts/analogy.py"


# Tables from training runs: each takes exactly the run sheet's rows of its output (params.runs) and their files.
for _table in ("table1", "table3", "table5", "table7", "table9", "table11"):

    rule:
        name:
            _table
        input:
            runs_of(_table),
        output:
            csv=report(output_path(_table), caption=f"../report/{_table}.rst", category=REPORT_CATEGORY[_table]),
            md=fill(TABLE_MD, name=_table),
        log:
            fill(REPORTS_LOG, name=_table),
        localrule: True
        conda:
            PIPELINE_ENV
        params:
            table=_table,
            runs=sheet_rows(_table),
        script:
            "../workflow_scripts/tables.py"


for _figure in FIGURES:

    rule:
        name:
            _figure
        input:
            runs=runs_of(_figure),
            metrics=runs_of(_figure, "metrics"),
        output:
            png=report(output_path(_figure), caption=f"../report/{_figure}.rst", category=REPORT_CATEGORY[_figure]),
            csv=fill(TABLE, name=_figure),
        log:
            fill(REPORTS_LOG, name=_figure),
        localrule: True
        conda:
            PIPELINE_ENV
        params:
            table=_figure,
            runs=sheet_rows(_figure),
        script:
            "../workflow_scripts/tables.py"


rule table10:
    """Table 4's analogy accuracy on each trained model's embedding layer, before and after training."""
    input:
        runs=runs_of("table10"),
        trained=runs_of("table10", "trained"),
        initial=[r["initial"] for r in table10_runs()],
        tokens=fill(PRETRAINED_TOKENS, block=config["table10"]["block"], side=config["table10"]["side"]),
        questions=raw(config["table4"]["questions"]),
    output:
        csv=report(output_path("table10"), caption="../report/table10.rst", category="Beyond the paper"),
        md=fill(TABLE_MD, name="table10"),
    log:
        fill(REPORTS_LOG, name="table10"),
    conda:
        PIPELINE_ENV
    resources:
        **CPU_JOB,
        mem_mb=4000,
    params:
        runs=table10_runs(),
        config=report_config("table10", "table4"),
    script:
        "../workflow_scripts/analogy.py"


rule paper_comparison:
    """paper_comparison.csv / .md: every cell with a paper and our value; the findings judged on the runs."""
    input:
        paper_tables=PAPER_TABLES,
        tables=[output_path(n) for n in config["outputs"] if re.fullmatch(r"table\d", n)],  # the ones built
        runs=[run["final"] for run in comparison_runs()],
    output:
        csv=report(output_path("paper_comparison"), caption="../report/paper_comparison.rst", category="Paper vs ours"),
        md=fill(TABLE_MD, name="paper_comparison"),
    log:
        fill(REPORTS_LOG, name="paper_comparison"),
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        runs=comparison_runs(),
    script:
        "../workflow_scripts/paper_comparison.py"
