# The paper's own numbers beside ours (embinit.reports.comparison): Tables 1-8 cell by cell, and whether the
# paper's three findings show in our numbers. Include after rules/tables.smk: it reads the `paper` rule's tables.

PAPER_TABLES = os.path.join(
    workflow.basedir, config.get("paper_comparison", {}).get("paper_tables", "resources/paper_tables.md")
)


rule paper_comparison:
    """paper_comparison.csv / .md: every cell with a paper and our value; the findings checked cell by cell."""
    input:
        paper_tables=PAPER_TABLES,
        tables=[output_path(n) for n in config["outputs"] if re.fullmatch(r"table\d", n)],  # the ones built
    output:
        csv=report(f"{RES}/paper_comparison.csv", caption="../report/paper_comparison.rst", category="Paper vs ours"),
        md=f"{RES}/paper_comparison.md",
    localrule: True
    conda:
        PIPELINE_ENV
    params:
        results_dir=RES,
    script:
        "../workflow_scripts/paper_comparison.py"
