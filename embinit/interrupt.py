"""Ctrl-C in a terminal sends SIGINT to Snakemake and to every job it runs: each job then says so in one line, not a
KeyboardInterrupt traceback, and exits 130 (what a shell reports for SIGINT). Snakemake removes the jobs' outputs; a
training run resumes from its last checkpoint."""

import signal
import sys


def quiet_interrupt(job) -> None:
    """End this Snakemake script (`job`: its `snakemake` object) on SIGINT with one line naming its rule and
    wildcards, unwinding as an exit does (files close; atomic writes stay whole or absent)."""
    wildcards = ", ".join(f"{name}={value}" for name, value in job.wildcards.items())
    name = f"{job.rule} ({wildcards})" if wildcards else job.rule

    def stop(signum, frame) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the unwinding short
        print(f"embinit: job {name} interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, stop)
