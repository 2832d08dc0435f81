"""Each table's rule depends on exactly the runs it shows: a dry run of the committed offline tables' rules plans
each with the final.json of the runs behind its rows (and the reference runs its Δ column pairs them with), no
more: Table 1 does not wait for Table 7's Xavier_Pretrained runs, Table 3 not for the seeds it does not show."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import REPO, run_snakemake
from test_dag import planned_jobs

RESULTS = "results/offline-cpu"
TABLES = ["table1", "table3", "table5", "table7", "table9", "table11"]


@pytest.fixture(scope="module")
def planned_inputs() -> dict[str, set[str]]:
    """rule -> its planned inputs, from one dry run that rebuilds every committed offline table from its records."""
    targets = [f"{RESULTS}/{t}.csv" for t in TABLES]
    args = ["-n", "--cores", "1", "--configfile", "config/offline-cpu.yaml", "--forcerun", *TABLES]
    proc = run_snakemake([*args, "--allowed-rules", *TABLES, "--", *targets])
    jobs = [job.split("\t") for job in planned_jobs(proc.stdout)]
    return {rule: set(inputs.split(", ")) for rule, _, inputs, *_ in jobs}


def runs(block: str, initializer: str, variant: str, seeds: int, files=("final.json",)) -> set[str]:
    return {f"{RESULTS}/{block}/{initializer}/seed{k}/{variant}/{file}" for k in range(seeds) for file in files}


def shown(table: str, reference: tuple[str, str] | None = None, files=("final.json",)) -> set[str]:
    """The runs' `files` behind a committed table's rows; with `reference` = (column, value), also the runs each row's
    paired Δ compares with (Xavier of the same variant, or the base model of the same initializer)."""
    rows = pd.read_csv(REPO / RESULTS / f"{table}.csv").drop_duplicates(["block", "initializer", "variant"])
    expected = set()
    for r in rows.itertuples():
        expected |= runs(r.block, r.initializer, r.variant, r.n_seeds, files)
        if reference and not pd.isna(r.diff_vs_xavier if reference[0] == "initializer" else r.diff_vs_base):
            other = {"initializer": r.initializer, "variant": r.variant, reference[0]: reference[1]}
            expected |= runs(r.block, other["initializer"], other["variant"], r.n_pairs)
    return expected


@pytest.mark.slow
@pytest.mark.parametrize(
    "table, files",
    [("table1", ("final.json",)), ("table3", ("final.json", "metrics.parquet")), ("table9", ("final.json",))],
)
def test_a_tables_inputs_are_the_runs_in_its_rows(planned_inputs, table, files):
    """Table 3 reads each run's metrics too: its input ratios at the best epoch."""
    assert planned_inputs[table] == shown(table, files=files)


@pytest.mark.slow
def test_table7_reads_its_control_and_the_xavier_runs_it_is_paired_with(planned_inputs):
    assert planned_inputs["table7"] == shown("table7", ("initializer", "Xavier"))
    assert not any("/Pretrained/" in path for path in planned_inputs["table7"])


@pytest.mark.slow
def test_table11_reads_each_coupling_and_the_untied_runs_it_is_paired_with(planned_inputs):
    assert planned_inputs["table11"] == shown("table11", ("variant", "base"))


@pytest.mark.slow
def test_table1_does_not_wait_for_table7s_control(planned_inputs):
    assert not any("/Xavier_Pretrained/" in path for path in planned_inputs["table1"])


@pytest.mark.slow
def test_table5_reads_the_base_runs_it_counts(planned_inputs):
    table = pd.read_csv(REPO / RESULTS / "table5.csv")
    inputs = planned_inputs["table5"]
    assert all(path.endswith("/base/final.json") for path in inputs)
    for row in table.itertuples():
        assert sum(f"/{row.block}/" in path for path in inputs) == row.n_runs, row.block
    assert {path.split("/")[2] for path in inputs} == set(table.block)


def test_seeds_by_initializer_give_a_column_fewer_seeds_and_leave_a_cell_out():
    """A column whose runs are still arriving (issue 56's GloVe columns at paper scale): its number over every cell, a
    per-variant number over that cell, 0 leaves the cell out, and the other columns keep their seeds."""
    from embinit.workflow.runsheet import cell_seeds

    section = {"seeds": 1, "seeds_by_variant": {"base": 3}, "seeds_by_initializer": {"P": 2, "PX": {"nopos": 0}}}
    assert [cell_seeds(section, "X", v) for v in ("base", "nopos")] == [3, 1]
    assert [cell_seeds(section, "P", v) for v in ("base", "nopos")] == [2, 2]
    assert [cell_seeds(section, "PX", v) for v in ("base", "nopos")] == [3, 0]


def test_table3_seeds_by_variant_give_one_cell_more_seeds():
    """Paper scale's frozen + P and trainable + P cells over 3 seeds while the no-P cells keep 2 (issues 33, 40, 56),
    and the recipe ablation's two single-change variants over 1 while its other cells take the block's 3."""
    from snakemake.utils import update_config

    from embinit.workflow.config import load
    from embinit.workflow.runsheet import run_sheet

    config = load(REPO / "config.yaml")
    update_config(config, load(REPO / "config" / "paper-scale-cpu.yaml"))
    sheet = run_sheet(config, {"final": "{block}/{init}/seed{seed}/{variant}/final.json"})

    def seeds(output: str) -> dict:
        return sheet[sheet.output == output].groupby("variant").seed.apply(list).to_dict()

    xavier = sheet[(sheet.output == "table3") & (sheet.initializer == "Xavier")]
    assert xavier.groupby("variant").seed.apply(list).to_dict() == {
        "base": [0, 1, 2], "frozen": [0, 1, 2], "nopos": [0, 1], "nopos_frozen": [0, 1, 2]
    }  # fmt: skip
    glove = sheet[(sheet.output == "table3") & (sheet.initializer != "Xavier")]
    assert {cell: sorted(g.seed) for cell, g in glove.groupby(["initializer", "variant"])} == {
        (init, v): [0, 1, 2] if init == "Pretrained" and v.startswith("nopos") else [0, 1]
        for init in ("Pretrained", "Pretrained_Xavier")
        for v in ("base", "frozen", "nopos", "nopos_frozen")
    }  # the GloVe columns' runs so far: seed 2 where it landed (seeds_by_initializer's over seeds_by_variant's)
    three = {v: [0, 1, 2] for v in ("frozen_legacy", "frozen", "base_legacy", "base")}
    assert seeds("recipe_ablation") == three | {"frozen_legacy_model": [0], "frozen_bucketed": [0]}
