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
            mem_mb=4000,
        params:
            config=report_config("table4"),  # a changed seed, pos_enc, pos_rows or sensitivity_rows rebuilds it
        script:
            "../workflow_scripts/analogy.py"


for _table, _runs in RESULT_TABLES.items():

    rule:
        name:
            f"table{_table}"
        input:
            _runs(),
        output:
            csv=report(output_path(f"table{_table}"), caption=f"../report/table{_table}.rst", category="Tables"),
            md=fill(TABLE_MD, name=f"table{_table}"),
        log:
            fill(REPORTS_LOG, name=f"table{_table}"),
        localrule: True
        conda:
            PIPELINE_ENV
        params:
            table=str(_table),
            config=report_config(),
        script:
            "../workflow_scripts/tables.py"


rule table3:
    """Multi30k GloVe: initializers x embedding trainable yes/no x position encoding yes/no."""
    input:
        table3_runs(),
    output:
        csv=report(output_path("table3"), caption="../report/table3.rst", category="Tables"),
        md=fill(TABLE_MD, name="table3"),
    log:
        fill(REPORTS_LOG, name="table3"),
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        table="3",
        config=report_config("table3"),
    script:
        "../workflow_scripts/tables.py"


rule figure1:
    """Validation BLEU per epoch, mean and one sigma over seeds, one panel per block."""
    input:
        runs=figure1_runs(FINAL),
        metrics=figure1_runs(METRICS),
    output:
        png=report(output_path("figure1"), caption="../report/figure1.rst", category="Figure 1"),
        csv=fill(TABLE, name="figure1"),
    log:
        fill(REPORTS_LOG, name="figure1"),
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        table="figure1",
        config=report_config("figure1"),
    script:
        "../workflow_scripts/tables.py"


# Beyond the paper: Tables 9 and 11 in Table 1's format, Table 10 (analogy after training), Figure 2 (mechanism).
for _table in ("table9", "table11"):

    rule:
        name:
            _table
        input:
            crossed_runs(_table),
        output:
            csv=report(output_path(_table), caption=f"../report/{_table}.rst", category="Beyond the paper"),
            md=fill(TABLE_MD, name=_table),
        log:
            fill(REPORTS_LOG, name=_table),
        localrule: True
        conda:
            PIPELINE_ENV
        params:
            table=_table.removeprefix("table"),
            config=report_config(_table),
        script:
            "../workflow_scripts/tables.py"


rule table10:
    """Table 4's analogy accuracy on each trained model's embedding layer, before and after training."""
    input:
        runs=table10_runs(FINAL),
        trained=table10_runs(TRAINED),
        initial=table10_runs(EMBEDDING),
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
        mem_mb=4000,
    params:
        config=report_config("table10", "table4"),
    script:
        "../workflow_scripts/analogy.py"


rule figure2:
    """The mechanism metrics per epoch: a panel per quantity, a line per initializer, one sigma over seeds."""
    input:
        runs=figure2_runs(FINAL),
        metrics=figure2_runs(METRICS),
    output:
        png=report(output_path("figure2"), caption="../report/figure2.rst", category="Beyond the paper"),
        csv=fill(TABLE, name="figure2"),
    log:
        fill(REPORTS_LOG, name="figure2"),
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        table="figure2",
        config=report_config("figure2"),
    script:
        "../workflow_scripts/tables.py"


rule paper_comparison:
    """paper_comparison.csv / .md: every cell with a paper and our value; the findings checked cell by cell."""
    input:
        paper_tables=PAPER_TABLES,
        tables=[output_path(n) for n in config["outputs"] if re.fullmatch(r"table\d", n)],  # the ones built
    output:
        csv=report(output_path("paper_comparison"), caption="../report/paper_comparison.rst", category="Paper vs ours"),
        md=fill(TABLE_MD, name="paper_comparison"),
    log:
        fill(REPORTS_LOG, name="paper_comparison"),
    localrule: True
    conda:
        PIPELINE_ENV
    script:
        "../workflow_scripts/paper_comparison.py"
