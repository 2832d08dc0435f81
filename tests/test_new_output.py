"""docs/extending.md's recipe for a new table holds: one `Output` entry in embinit/workflow/outputs.py, one builder in
embinit/reports/builders.py and one caption in report/, then its name in `outputs:`, and the workflow builds it; a
seeded output need not be called `table<N>`, and the paper comparison and findings beside it still build."""

import os
import shutil
import subprocess

import pandas as pd
import pytest

from conftest import ONE_RUN, REPO, one_run_config, snakemake_command

CODE = ["Snakefile", "rules", "embinit", "workflow_scripts", "config.yaml", "schemas", "resources", "envs", "report"]
ENTRY = """        Output(  # a table of yours: each run's dev accuracy, a row a seed
            "seed_scores",
            "Beyond the paper",
            Selection(runs=lambda config: {"blocks": config["run_blocks"]}),
            role=Role(seeded=True, compared=True),
        ),
"""
BUILDER = """

def seed_scores(job) -> pd.DataFrame:
    rows = _rows(job)
    table = pd.DataFrame(
        {"initializer": rows.initializer, "seed": rows.seed, "acc": [tables.read_final(f)["best_valid_acc"] for f in rows.final]}
    )
    table.to_csv(job.output.csv, index=False)
    with open(job.output.md, "w") as md:
        md.write(table.to_markdown(index=False))
    return table
"""


@pytest.mark.slow
def test_a_table_of_any_name_through_the_three_files_extending_names(tmp_path, one_run_grid, shared_mirror):
    code = tmp_path / "code"
    code.mkdir()
    for name in CODE:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, code / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if (REPO / name).is_dir() else {}))  # fmt: skip
    outputs = code / "embinit" / "workflow" / "outputs.py"
    anchor = '        Output("paper_comparison", "Paper vs ours", Selection(tables=True)),\n'
    assert anchor in outputs.read_text()
    outputs.write_text(outputs.read_text().replace(anchor, anchor + ENTRY))
    builders = code / "embinit" / "reports" / "builders.py"
    builders.write_text(builders.read_text() + BUILDER)
    (code / "report" / "seed_scores.rst").write_text("Each run's dev accuracy, a row a seed.\n")

    workdir = shutil.copytree(one_run_grid, tmp_path / "grid")
    cfg = one_run_config(
        workdir / "c.yaml", shared_mirror, outputs=["seed_scores", "table1", "paper_comparison", "findings"]
    )
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONHASHSEED": "0"}
    targets = ["results/seed_scores.csv", "results/paper_comparison.csv", "results/findings.csv"]
    proc = subprocess.run([*snakemake_command(workdir, code), *targets, "--cores", "1", "--configfile", str(cfg)],
                          capture_output=True, text=True, env=env, cwd=workdir, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rule train" not in proc.stdout  # the grid's run is current: only the tables build
    scores = pd.read_csv(workdir / "results" / "seed_scores.csv")
    assert scores.to_dict("records") == [
        {"initializer": "Pretrained", "seed": 0, "acc": pd.read_json(workdir / ONE_RUN / "final.json", typ="series")["best_valid_acc"]}
    ]  # fmt: skip
    assert (workdir / "results" / "findings.csv").is_file()
