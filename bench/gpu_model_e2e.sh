#!/usr/bin/env bash
# Model in, faster model out on one GPU: the example block at two sizes, fp32 and
# fp16: profile (CUDA activities), extract, each hand-written kernel judged
# against its extracted task, apply as custom ops, end-to-end outputs and times
# in eager and under torch.compile (inductor). Results in $OUT/model_e2e_*.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for precision in fp32 fp16; do
    timeout 280 python bench/model_e2e.py --out "$OUT/model_e2e_small_$precision" \
        --precision "$precision" > "$OUT/model_e2e_small_$precision.log" 2>&1
    echo "small $precision: exit $?" >> "$OUT/model_e2e.txt"
    timeout 280 python bench/model_e2e.py --out "$OUT/model_e2e_large_$precision" \
        --batch 8 --seq 1024 --dim 1024 --heads 16 --precision "$precision" \
        > "$OUT/model_e2e_large_$precision.log" 2>&1
    echo "large $precision: exit $?" >> "$OUT/model_e2e.txt"
done
cat "$OUT/model_e2e.txt"
for f in "$OUT"/model_e2e_*/model_e2e.json; do echo "== $f"; cat "$f"; done
