# Stage 5, reports (embinit/reports): one rule per output of the registry embinit/workflow/outputs.py, named as the output.
# Each takes its runs' files from the run sheet and its layer files from the layer sheet (rules/common.smk), and
# hands their rows to the output's builder (embinit.reports.builders, by workflow_scripts/report.py).
from embinit.workflow.outputs import OUTPUTS, seeded_tables
from embinit.workflow.paths import fill

for _out in OUTPUTS.values():

    rule:
        name:
            _out.name
        input:
            unpack(output_inputs(_out)),
        output:
            **W.output_files(_out),
        log:
            fill(P.reports_log, name=_out.name),
        localrule: _out.role.local
        conda:
            PIPELINE_ENV
        resources:
            **({} if _out.role.local else {**CPU_JOB, "mem_mb": 4000}),
        params:
            **({"seeded": seeded_tables()} if _out.selects.tables else {}),
            output=_out.name,
            rows=on_dag(W.sheet_rows, _out),
            layers=on_dag(W.layer_rows, _out),
            records=on_dag(W.output_records, _out),  # their digest goes beside the output (embinit.identity.records)
            config=_out.config_of(config),  # a changed section (e.g. table4's seed or pos_rows) rebuilds it
        script:
            "../workflow_scripts/report.py"


rule summary:
    input:
        records=[
            f"{s}/{f}"
            for s in config["summary"]["sets"].values()
            for f in ("runs.csv", "paper_comparison.csv", "findings.csv", "table3.csv")
        ],
        code="embinit/reports/summary.py",  # its figure and table: an edit there rebuilds them
    output:
        **{fmt: f"{config['summary']['to']}.{fmt}" for fmt in ("png", "svg", "md")},
    log:
        f"{config['summary']['to']}.log",
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        sets=config["summary"]["sets"],
        finding1=config["summary"]["finding1"],
    script:
        "../workflow_scripts/summary.py"
