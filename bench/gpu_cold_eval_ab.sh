#!/usr/bin/env bash
# One short device call: `kernelevo eval --local` of the softmax example on a
# fresh machine (first, empty caches), then, with the caches warm, three
# pairs: as the command runs (the judge starts the forkserver when it needs
# it) and with the forkserver started before the command imports torch
# (the way tried, with the forkserver then compiling its imports from source,
# on 2026-12-01; here by a wrapper, the command unchanged).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
TASK=examples/softmax/task.py CAND=examples/softmax/triton_candidate.py
EARLY="import sys
from kernelevo.cache_dir import keep_bytecode
keep_bytecode()
from kernelevo.evaluate.sandbox.jobs import start_forkserver
start_forkserver(False)
sys.argv = ['kernelevo', 'eval', '$TASK', '$CAND', '--local']
from kernelevo.cli.app import main
main()"
TIMEFORMAT=%R
one() {  # label, command...
    local label=$1; shift
    wall=$( { time timeout 120 "$@" > "$OUT/eval_$label.txt" 2>&1 ; } 2>&1 )
    echo "$label: $wall s, $(grep -c 'passed' "$OUT/eval_$label.txt") passed lines" >> "$OUT/cold_eval_ab.txt"
}
one first python -m kernelevo.cli.app eval $TASK $CAND --local
for i in 1 2 3; do
    one plain$i python -m kernelevo.cli.app eval $TASK $CAND --local
    one early$i python -c "$EARLY"
done
cat "$OUT/cold_eval_ab.txt"
for f in "$OUT"/eval_*.txt; do echo "$(basename $f): $(tr '\n' ' ' < $f | grep -o 'worker_start [0-9.]*\|reference_wait [0-9.]*\|total [0-9.]*' | tr '\n' ' ')"; done
