"""The packs of one invocation (rules/training.smk, rule `pack`): the runs its targets need that must train, k to a
job, planned by the main Snakemake and written down for the jobs, which cannot plan them again (records change as
runs finish)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from embinit.workflow.cluster import packs
from embinit.workflow.outputs import targeted_outputs
from embinit.workflow.paths import fill
from embinit.workflow.plan import Plan, RunKey


def targeted_runs(plan: Plan, targets: set[str]) -> list[RunKey]:
    """The runs `targets` need, in the run sheet's order: those of the outputs they build, and the runs whose files
    they name; then the runs whose final.json they name that no output shows (yet: a cell that
    `seeds_by_initializer` leaves out until its runs exist)."""
    targets = {os.path.normpath(t) for t in targets}
    res = plan.config["results_dir"]
    sheet, files = plan.runs, [c for c in plan.paths.run_files if c != "run"]
    named = sheet[files].map(os.path.normpath).isin(targets).any(axis=1)
    rows = sheet[sheet.output.isin(targeted_outputs(plan.config, targets, res)) | named]
    runs = [RunKey(*run) for run in zip(rows.block, rows.initializer, rows.seed, rows.variant)]
    for target in sorted(t for t in targets if t.endswith("final.json")):
        parts = os.path.relpath(target, res).split(os.sep)  # block, init, seed<k>, variant, final.json
        if len(parts) == 5 and re.fullmatch(r"seed\d+", parts[2]):
            runs.append(RunKey(parts[0], parts[1], int(parts[2][4:]), parts[3]))
    return list(dict.fromkeys(runs))


def planned_packs(
    plan: Plan, targets: set[str], stale: Callable[[RunKey], str | None], k: int, stacked: bool
) -> list[list[RunKey]]:
    """The targeted runs whose records are missing or stale (`stale(run)`: why, or None), k to a pack (stacked: one
    block's runs to a pack)."""
    runs = [run for run in targeted_runs(plan, targets) if not Path(run.fill(plan.paths.final)).is_file() or stale(run)]
    return packs(runs, k, by=(lambda run: run.block) if stacked else None)


def write_pack_lists(planned: list[list[RunKey]], template: str, stamp: str) -> None:
    """Each pack's runs, for its job."""
    for index, members in enumerate(planned):
        listed = Path(fill(template, stamp=stamp, index=index))
        listed.parent.mkdir(parents=True, exist_ok=True)
        listed.write_text(json.dumps([list(run) for run in members]) + "\n", encoding="utf-8")


def read_pack_list(listed: str) -> list[RunKey]:
    """A pack's runs as its invocation's main process wrote them down."""
    if not Path(listed).is_file():
        raise FileNotFoundError(
            f"{listed}: the pack's run list is missing (the main process writes it at start; --no-hooks skips that)"
        )
    return [RunKey(*run) for run in json.loads(Path(listed).read_text(encoding="utf-8"))]
