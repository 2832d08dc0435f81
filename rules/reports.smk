# Stage 5, reports (embinit/reports): one rule per output of the registry embinit/outputs.py, named as the output.
# Each takes its runs' files from the run sheet and its layer files from the layer sheet (rules/common.smk), and
# hands their rows to the output's builder (workflow_scripts/report.py).


def output_files(out):
    """A figure's PNG and its data, a table's CSV (and Markdown); the first is in the HTML report."""
    shown = report(fill(FIGURE if out.figure else TABLE, name=out.name), f"../report/{out.name}.rst", out.category)
    if out.figure:
        return {"png": shown, "csv": fill(TABLE, name=out.name)}
    return {"csv": shown, **({"md": fill(TABLE_MD, name=out.name)} if out.markdown else {})}


def output_inputs(out):
    """An output's input files: its runs' (the sheet's columns `out.files`), its layer files, and the raw files its
    config sections name; the paper comparison reads the tables built and the seeded ones' runs."""
    query = f"output in {sheet_outputs(out)}"
    inputs = {column: lookup(query=query, within=RUNS, cols=column) for column in out.files}
    inputs["layers"] = lookup(query=f"output == {out.name!r}", within=LAYERS, cols="path")
    inputs.update({role: raw(relpath) for role, relpath in out.raw_files(config).items()})
    if out.reads_tables:
        inputs["paper_tables"] = os.path.join(workflow.basedir, config["paper_comparison"]["paper_tables"])
        inputs["tables"] = [getattr(rules, n).output.csv for n in config["outputs"] if OUTPUTS[n].compared]
    return inputs


def sheet_outputs(out):
    """The outputs whose run-sheet rows `out` reads: its own, or for the paper comparison the seeded tables built."""
    return [n for n in config["outputs"] if OUTPUTS[n].seeded] if out.reads_tables else [out.name]


def sheet_rows(out):
    """The run-sheet rows `out`'s builder reads (params.rows); the paper comparison's keep their `output`."""
    rows = RUNS[RUNS.output.isin(sheet_outputs(out))]
    return (rows if out.reads_tables else rows.drop(columns="output")).to_dict("records")


for _out in OUTPUTS.values():

    rule:
        name:
            _out.name
        input:
            **output_inputs(_out),
        output:
            **output_files(_out),
        log:
            fill(REPORTS_LOG, name=_out.name),
        localrule: _out.local
        conda:
            PIPELINE_ENV
        resources:
            **({} if _out.local else {**CPU_JOB, "mem_mb": 4000}),
        params:
            output=_out.name,
            rows=sheet_rows(_out),
            layers=LAYERS[LAYERS.output == _out.name].drop(columns="output").to_dict("records"),
            config=_out.config_of(config),  # a changed section (e.g. table4's seed or pos_rows) rebuilds it
        script:
            "../workflow_scripts/report.py"
