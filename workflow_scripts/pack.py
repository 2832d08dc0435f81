"""Snakemake script (rule pack): train a pack's runs at the same time in this job, each its own Snakemake job, or
(cluster.stack) in this process as stacks (embinit.training.stacked.train_stacks).

One Snakemake on the local executor inside the job trains every run of the pack whose record is missing or stale,
side by side (--cores = the pack's CPUs, --set-threads train=<a run's threads>), on the job's GPU. Each run's files
are its own job's: a pack cut short (time limit, scancel) keeps the runs it finished, and the next pack of the run
resumes the others from their checkpoint.pt (--rerun-incomplete).

Stacked, each run's files are those its train job would write, and the next Snakemake finds them up to date.

Expects:
  snakemake.params   runs (each run's final.json), train_threads, config (the config files and --config values the
                     workflow was started with), snakefile, deployment (--sdm methods); stack, and for it members
                     (each run's spec, RunSpec.identity(), and its named input files), extensions, placement
  snakemake.output   the pack's record (JSON: its runs and seconds), written when every run trained
  snakemake.log[0]   the inner Snakemake's output
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from embinit.interrupt import quiet_interrupt
from embinit.training.spec import RunFiles, RunSpec
from embinit.training.stacked import train_stacks

quiet_interrupt(snakemake)

params = snakemake.params
record = Path(snakemake.output[0])


def stacked() -> None:
    """Train the pack's runs here, stacks of the runs that can share a model (the others alone)."""
    params.extensions.load()
    members = [(RunSpec.of(spec), RunFiles.of(inputs)) for spec, inputs in params.members]
    with open(snakemake.log[0], "a", encoding="utf-8") as log:
        print(f"{len(members)} runs trained here as stacks (each run's lines in its train.log):", file=log)
        print(*params.runs, sep="\n", file=log, flush=True)
    placement = params.placement.with_job_threads(params.train_threads)
    failed = train_stacks(members, [Path(run).parent for run in params.runs], placement)
    if failed:
        raise SystemExit(
            f"pack {record}: {len(failed)} of its stacks failed (each run's train.log says why):\n" + "\n".join(failed)
        )


def side_by_side() -> None:
    """Train the pack's runs by a Snakemake inside this job, each run its own job and process."""
    given = record.with_name(record.name.replace(".json", ".config.yaml"))
    given.write_text(yaml.safe_dump(dict(params.config), sort_keys=False), encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "snakemake",
        *params.runs,  # before the options that take several values
        "--snakefile",
        str(params.snakefile),
        "--configfile",
        str(given),
        "--nolock",  # the Snakemake that submitted this job holds the locks
        "--rerun-incomplete",
        "--keep-going",
        "--allowed-rules",
        "train",
        "--cores",  # the pack's CPUs (snakemake.threads is capped at the CPUs of the node this Snakemake was started on)
        str(params.train_threads * len(params.runs)),
        "--set-threads",
        f"train={params.train_threads}",
        *(["--sdm", *params.deployment] if params.deployment else []),
    ]
    with open(snakemake.log[0], "a", encoding="utf-8") as log:
        print(" ".join(command), file=log, flush=True)
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    finished = [run for run in params.runs if Path(run).is_file()]
    if code:
        raise SystemExit(
            f"pack {record}: {len(finished)} of {len(params.runs)} runs finished; the Snakemake training them exited "
            f"{code}: see {snakemake.log[0]}"
        )


start = time.time()
(stacked if params.stack else side_by_side)()
record.write_text(json.dumps({"runs": params.runs, "seconds": round(time.time() - start, 1)}, indent=1) + "\n")
