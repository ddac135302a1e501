#!/usr/bin/env bash
# One short device call: `kernelevo eval --local` of the softmax example on a
# fresh machine (first: empty caches), then three more with the caches warm;
# each eval's wall in $OUT/cold_eval.txt, its output in $OUT/eval_*.txt.
#   device run: bash bench/gpu_cold_eval.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
TIMEFORMAT=%R
for label in first warm1 warm2 warm3; do
    wall=$( { time timeout 120 python -m kernelevo.cli.app eval examples/softmax/task.py \
        examples/softmax/triton_candidate.py --local > "$OUT/eval_$label.txt" 2>&1 ; } 2>&1 )
    echo "$label: $wall s, exit $(grep -c passed "$OUT/eval_$label.txt") passed lines" >> "$OUT/cold_eval.txt"
done
cat "$OUT/cold_eval.txt"; grep -h -A3 "phases" "$OUT"/eval_*.txt
