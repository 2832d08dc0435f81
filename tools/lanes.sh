#!/usr/bin/env bash
# Trains paper-scale's remaining D = 300 runs on the CPU in two background lanes, one run a core, at nice 19, from the
# clone this script runs in (one commit); a run cut off resumes from its checkpoint.pt (--rerun-incomplete).
# Usage, from the clone's root: bash tools/lanes.sh   (logs: lanes/A.log, lanes/B.log; a finished run's final.json)
set -euo pipefail
cd "$(dirname "$0")/.."
R=results/paper-scale-cpu/multi30k_xavier300
S=(nice -n 19 .venv/bin/snakemake --configfile config/paper-scale-cpu.yaml --config mirror=../shared/data
   --cores 1 --set-threads train=1 --rerun-incomplete --nolock)
A=(Pretrained/seed2/nopos_frozen Pretrained/seed2/nopos Pretrained/seed2/frozen Pretrained_Xavier/seed2/nopos_frozen
   Pretrained_Xavier/seed2/nopos)
B=(Xavier/seed2/nopos_frozen Xavier/seed2/nopos Pretrained/seed2/base Pretrained_Xavier/seed2/frozen
   Pretrained_Xavier/seed2/base)
mkdir -p lanes
# the runs' shared inputs first, once (two lanes building them at once would race)
"${S[@]}" --omit-from train -- $(printf "$R/%s/final.json " "${A[@]}" "${B[@]}") >lanes/inputs.log 2>&1
# a run with a record is done: in a fresh clone its inputs are newer than the committed record, and Snakemake would
# train it again; a cut run has none and resumes from its checkpoint.pt
lane() { for run in "$@"; do [ -e "$R/$run/final.json" ] || "${S[@]}" -- "$R/$run/final.json"; done; }
nohup bash -c "$(declare -p S R); $(declare -f lane); lane ${A[*]}" >lanes/A.log 2>&1 &
nohup bash -c "$(declare -p S R); $(declare -f lane); lane ${B[*]}" >lanes/B.log 2>&1 &
echo "lanes started: tail -f lanes/A.log lanes/B.log"
