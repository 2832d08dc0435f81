"""Train runs on a GPU machine without internet (your own, a rented box) through the workflow itself.

    .venv/bin/python tools/offline_gpu.py prepare --configfile config/paper-scale-cpu.yaml [--mirror DIR] -- TARGET ...
    (there, in a copy of this checkout with the paths `prepare` lists)   bash .offline-gpu/run.sh
    .venv/bin/python tools/offline_gpu.py collect records-run.tgz

`prepare` (here, with internet or the mirror) writes .offline-gpu/ (ignored by git): the wheels of snakemake and what it
needs beyond the GPU machine's Python packages (Python 3.12, x86-64); run.sh, which installs them beside that Python,
runs `snakemake --profile profiles/local-gpu` on the targets with the rules that build layers and train (nothing
fetched; --stack K: a block's runs K to a process, as one stacked model, config cluster.stack), and packs every run record it wrote into $OUT/records-<script>.tgz (or ./records-<script>.tgz); and carry.txt, the ignored
paths the machine needs: the vocabularies, tokenized splits and BLEU references, and each block's extracted
pre-trained matrix, built here first (a carry over a device call's 8 paths or 64 MiB stops prepare, naming why). `collect` unpacks the records into the results directory, each as the train
rule wrote it, and lists them (docs/performance.md, "A GPU machine without internet").
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / ".offline-gpu"
# The GPU machine's Python and its packages (the device image's list, /work/.library/device/KINDS.md): a wheel of one of
# these is not carried. pulp (16 MB) is left out too: run.sh schedules with --scheduler greedy, which never imports it.
PYTHON, PLATFORMS = "3.12", ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
THERE = set(
    "attrs certifi charset-normalizer click cloudpickle filelock fsspec idna jinja2 markupsafe numpy packaging pandas "
    "psutil pyarrow pyyaml requests sacrebleu safetensors six tabulate tokenizers torch tqdm "
    "typing-extensions urllib3 wrapt pulp".split()
)
# Needed by none of the rules run there (huggingface_hub downloads through it; nothing is downloaded there): 4 MB
NOT_NEEDED = {"hf-xet"}
SDIST_ONLY = ("connection_pool",)  # snakemake needs it, PyPI has no wheel of it: built here (pure Python)
# what the workflow imports that the machine lacks (its huggingface_hub is older), their needs followed
PACKAGES = ("snakemake", "jsonschema", "huggingface_hub")
# What the train and layer jobs read: the data stage's outputs for the targets' tasks (data/<stage>/<task>) and the
# extracted pre-trained matrices
DATA_STAGES = ("vocab", "tokenized", "references")
RULES = ("initialize_embedding", "train", "pack")
CARRY_PATHS, CARRY_BYTES = 8, 64 * 2**20  # what one device call takes along: paths, and bytes in all


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True)


def wheels(folder: Path) -> list[str]:
    """Download the wheels for the machine's Python into `folder`, drop those it has; their names."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in SDIST_ONLY:
        pip("wheel", "--no-deps", "-w", str(folder), f"{name}=={importlib.metadata.version(name)}")
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pinned = [f"{name}=={importlib.metadata.version(name)}" for name in PACKAGES]
    pip("download", "--only-binary=:all:", "--find-links", str(folder), "--python-version", PYTHON,
        "--implementation", "cp", *platforms, "-d", str(folder), *pinned)  # fmt: skip
    kept = []
    for wheel in sorted(folder.glob("*.whl")):
        if re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower() in THERE | NOT_NEEDED:
            wheel.unlink()
        else:
            kept.append(wheel.name)
    return kept


def snakemake_args(configfile: str, mirror: str | None, targets: list[str], stack: int = 0) -> list[str]:
    """`stack` > 1: one block's runs train stack by stack of that many, one process each (config cluster.stack)."""
    config = [f"mirror={mirror}"] if mirror else []
    config += [f"cluster={{pack: {stack}, stack: true}}"] if stack > 1 else []
    return ["--configfile", configfile, *(["--config", *config] if config else []), "--", *targets]


def block_dirs(configfile: str, targets: list[str]) -> list[str]:
    """The block folders of the targets' runs (<results_dir>/<block>): where their pre-trained matrices are."""
    import yaml

    results_dir = yaml.safe_load((REPO / configfile).read_text(encoding="utf-8"))["results_dir"]
    blocks = {Path(t).relative_to(results_dir).parts[0] for t in targets}
    return [f"{results_dir}/{block}" for block in sorted(blocks)]


def data_dirs(configfile: str, blocks: list[str]) -> list[str]:
    """The data stage's folders of the blocks' tasks that exist (a classification task has no references): only
    those travel, so a result set's other tasks do not count against the call's 64 MiB."""
    import yaml
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))
    # merged as Snakemake merges --configfile: a set's block may set only its seeds, keeping config.yaml's task
    update_config(config, yaml.safe_load((REPO / configfile).read_text(encoding="utf-8")))
    tasks = sorted({config["blocks"][Path(block).name]["task"] for block in blocks})
    paths = [f"data/{stage}/{task}" for task in tasks for stage in DATA_STAGES]
    return [path for path in paths if (REPO / path).is_dir()]


def tracked_bytes() -> int:
    """What travels with any device call beside the carry: the tracked files and the untracked ones git does not
    ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True).stdout  # fmt: skip
    return sum((REPO / name).stat().st_size for name in listed.decode().split("\0") if (REPO / name).is_file())


def pretrained_files(blocks: list[str]) -> list[str]:
    """The blocks' extracted pre-trained matrices (pretrained_<side>.npy and .parquet), carried one by one: a block's
    folder also holds the layers built here, too large to take along (a D = 300 pair is 16 MB; built there)."""
    return [str(p.relative_to(REPO)) for block in blocks for p in sorted((REPO / block).glob("pretrained_*"))]


def carried(carry: list[str]) -> list[tuple[int, Path]]:
    """The files `carry` takes along, with their sizes in bytes, largest first."""
    paths = [p for path in carry for p in ([REPO / path] if (REPO / path).is_file() else (REPO / path).rglob("*"))]
    return sorted(((p.stat().st_size, p) for p in paths if p.is_file()), reverse=True)


def carry_problem(carry: list[str], files: list[tuple[int, Path]], tracked: int = 0) -> str | None:
    """Why a device call cannot take `carry` (its `carried` files) along beside `tracked` bytes of the checkout: too
    many paths or bytes, the largest files named; or None."""
    if len(carry) > CARRY_PATHS:
        return f"{len(carry)} paths to carry, a device call takes {CARRY_PATHS}: {carry}; prepare one bundle a block"
    if (total := sum(size for size, _ in files)) + tracked > CARRY_BYTES:
        largest = ", ".join(f"{p.relative_to(REPO)} ({size / 2**20:.1f} MiB)" for size, p in files[:5])
        return (f"{total / 2**20:.0f} MiB to carry beside the checkout's {tracked / 2**20:.0f} MiB, a device call "
                f"takes {CARRY_BYTES / 2**20:.0f} in all; largest carried: {largest}")  # fmt: skip
    return None


RUN_SH = """#!/usr/bin/env bash
# Written by tools/offline_gpu.py prepare: the workflow on this GPU machine, then every record it wrote packed in one file.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
    .offline-gpu/wheels/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
out=${{OUT:-.}}
{bench}# stopped (SIGTERM: jobs cancelled, their partial outputs removed) in time to pack what finished; GPU_TIME_LIMIT
# overrides the limit, for a script started later in a call than planned
timeout --kill-after=30 "${{GPU_TIME_LIMIT:-{time_limit}}}" python3 -m snakemake --profile profiles/local-gpu --cores "$(nproc)" \\
    --resources gpu_jobs={gpu_jobs} --scheduler greedy --allowed-rules {rules} {args}
status=$?
find {results} -path '*/seed*/*' \\( -name final.json -o -name metrics.parquet -o -name 'test.*.txt' \\
    -o -name train.log \\) -newer .offline-gpu/{script} -print0 | tar -czf "$out/records-{stem}.tgz" --null -T -
tar -tzf "$out/records-{stem}.tgz" | grep -c final.json | sed 's/$/ run records packed/'
exit $status
"""


# --bench: before training, the stacked step against k runs one after another on this GPU (docs/performance.md,
# "Stacked runs"), about a minute, into $out/stacked.json
BENCH = """PYTHONPATH=$PWD:$PWD/bench:/tmp/site timeout 300 python3 bench/stacked_step.py --device cuda --dims 300 \\
    --ks 1 8 16 32 --steps 20 --json "$out/stacked.json"
"""


# --detach: one GPU session over two calls (a command runs 10 minutes at most, a machine stays warm 30 s between
# calls). The run script trains in the background, in a copy of the checkout, so the second call's copy of the tree
# touches nothing it reads; each call hands back what it has packed so far.
DETACH_SH = """#!/usr/bin/env bash
# Written by tools/offline_gpu.py prepare --detach. Call 1: start; call 2, at once while the machine is warm: collect.
#   bash .offline-gpu/detach.sh start <script> <deadline s> <wait s>: copies this checkout to $WORK and starts .offline-gpu/<script>
#     there in a new session, stopped in time to pack its records <deadline s> from now; waits up to <wait s>
#   bash .offline-gpu/detach.sh collect <wait s>: waits up to <wait s> for it to end
# Each then copies the records packed so far and the run's log into $OUT and says whether the run has ended.
set -uo pipefail
STATE=${{GPU_STATE:-/tmp/offline-gpu-state}} WORK=${{GPU_WORK:-/tmp/offline-gpu-work}}
wait_for() {{
    local end=$(($(date +%s) + $1))
    while [ ! -e "$STATE/done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
}}
hand_back() {{
    cp "$STATE"/records-*.tgz "$STATE/run.log" "${{OUT:-.}}"/ 2>/dev/null
    grep -E 'of [0-9]+ steps|run records packed|Error|Terminated' "$STATE/run.log" | tail -5
    echo "epochs so far: $(find "$WORK/results" -name train.log -newer "$STATE/t0" -exec grep -ho ' epoch [0-9]*:' {{}} + |
        sort -u | wc -l) (the most any run logged)"
    if [ -e "$STATE/done" ]; then echo "offline-gpu: ended, $(cat "$STATE/done")"; else echo "offline-gpu: still running"; fi
}}
case ${{1:-}} in
start)
    rm -rf "$STATE" "$WORK" && mkdir -p "$STATE" && touch "$STATE/t0" && cp -a "$(dirname "$0")/.." "$WORK" || exit
    setsid -f bash -c 'GPU_TIME_LIMIT=$1 OUT=$2 bash "$3/.offline-gpu/$4"; echo "exit $?" > "$2/done"' _ \\
        $(($3 - 45)) "$STATE" "$WORK" "$2" > "$STATE/run.log" 2>&1 < /dev/null
    wait_for "$4"; hand_back ;;
collect) wait_for "$2"; hand_back ;;
*) echo "usage: bash .offline-gpu/detach.sh start <script> <deadline s> <wait s> | collect <wait s>" >&2; exit 2 ;;
esac
"""


def prepare(args: argparse.Namespace) -> None:
    sm = [sys.executable, "-m", "snakemake", "--cores", str(args.cores)]
    # the data, vocabularies and pre-trained matrices the runs need, here (the layers are built there: smaller)
    data_stage = ["--rerun-incomplete", "--omit-from", *RULES]
    subprocess.run(
        [*sm, *data_stage, *snakemake_args(args.configfile, args.mirror, args.targets)], cwd=REPO, check=True
    )
    kept = wheels(BUNDLE / "wheels")
    blocks = block_dirs(args.configfile, args.targets)
    there = " ".join(map(shlex.quote, snakemake_args(args.configfile, None, args.targets, args.stack)))
    run_sh = BUNDLE / args.script
    run_sh.write_text(
        RUN_SH.format(rules=" ".join(RULES), args=there, results=" ".join(blocks), gpu_jobs=args.gpu_jobs,
                      script=args.script, stem=Path(args.script).stem, time_limit=args.time_limit,
                      bench=BENCH if args.bench else ""),
        encoding="utf-8",
    )  # fmt: skip
    carry_txt = BUNDLE / "carry.txt"  # every script's paths: one call carries what any of them needs
    before = carry_txt.read_text(encoding="utf-8").split() if carry_txt.exists() else []
    carry = list(
        dict.fromkeys([".offline-gpu", *before, *data_dirs(args.configfile, blocks), *pretrained_files(blocks)])
    )
    files = carried(carry)
    if problem := carry_problem(carry, files, tracked_bytes()):
        raise SystemExit(f"tools/offline_gpu.py prepare: {problem}")
    carry_txt.write_text("\n".join(carry) + "\n", encoding="utf-8")
    size = sum(size for size, _ in files) / 2**20
    print(
        f"{len(kept)} wheels in .offline-gpu/wheels; carry ({size:.0f} MiB; the tracked files travel beside): {carry}"
    )
    if args.detach:
        (BUNDLE / "detach.sh").write_text(DETACH_SH.format(), encoding="utf-8")
        print(f"device call 1 (timeout_s 600), carry as above: 'bash .offline-gpu/detach.sh start {args.script} "
              f"{args.detach} 550'; call 2 at once (no carry; its timeout_s the budget left less 30): 'bash "
              ".offline-gpu/detach.sh collect <that less 15>'; then: tools/offline_gpu.py collect <files_at>/records-<script>.tgz")  # fmt: skip
    else:
        print(
            f"device call: command 'bash .offline-gpu/{args.script}', carry as above; then: "
            "tools/offline_gpu.py collect <files_at>/records-<script>.tgz"
        )


def collect(args: argparse.Namespace) -> None:
    with tarfile.open(args.records) as packed:
        members = [m for m in packed.getmembers() if m.isfile() and m.name.startswith("results/")]
        packed.extractall(REPO, members=members, filter="data")
    finals = sorted(m.name for m in members if m.name.endswith("final.json"))
    print(f"{len(finals)} run records into {REPO / 'results'}:", *finals, sep="\n  ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--configfile", required=True)
    p.add_argument("--mirror", default="../shared/data")
    p.add_argument("--cores", type=int, default=2, help="here, for the data jobs")
    p.add_argument("--gpu-jobs", type=int, default=8, help="there, training jobs sharing the GPU (profiles/local-gpu)")
    p.add_argument("--stack", type=int, default=0, help="there, runs of a block in one stacked process (0: each alone)")
    p.add_argument("--bench", action="store_true", help="there, first time the stacked step (bench/stacked_step.py)")
    p.add_argument("--script", default="run.sh", help="its name in .offline-gpu/ (one per result set or call)")
    p.add_argument("--time-limit", type=int, default=3_000_000, help="seconds snakemake runs there before the packing")
    p.add_argument("--detach", type=int, default=0, metavar="DEADLINE",
                   help="there, over two calls: records packed DEADLINE seconds after the first call's start")  # fmt: skip
    p.add_argument("targets", nargs="+")
    p.set_defaults(fn=prepare)
    c = sub.add_parser("collect")
    c.add_argument("records", type=Path)
    c.set_defaults(fn=collect)
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
