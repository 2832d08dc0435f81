"""Wall and CPU seconds of N dry runs of one run's final.json, each a start forked from the tests' snakemake zygote
(tests/snakemake_zygote.py), on the tests' one-run config and tiny mirror; the CPU is the zygote's tree (its own
start counted once). Before and after a change of the zygote, alternated in one shell:

    python bench/zygote_starts.py 12; git stash; python bench/zygote_starts.py 12; git stash pop
"""

import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import ONE_RUN, ZYGOTE, one_run_config, run_snakemake, write_tiny_mirror  # noqa: E402


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cfg = one_run_config(work / "c.yaml", write_tiny_mirror(work / "mirror"))
        run_snakemake(["--list-rules", "--configfile", str(cfg)], cwd=work)  # starts the zygote
        start = time.perf_counter()
        for _ in range(n):
            run_snakemake(["-n", f"{ONE_RUN}/final.json", "--configfile", str(cfg)], cwd=work)
        wall = time.perf_counter() - start
        ZYGOTE[0].close()
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    print(f"{n} starts: wall {wall:.1f} s, zygote tree user CPU {cpu:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]))
