#!/usr/bin/env bash
# One short device call: reference times on normal against stress input sets
# (bench/stress_set_timing.py, examples and KernelBench level 1), then
# `kernelevo eval --local` of the softmax example as committed (the command
# starts the forkserver before it imports torch): a fresh machine, then warm.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/machine.txt" 2>&1
timeout 240 python bench/stress_set_timing.py --out "$OUT" --kernelbench .kb/KernelBench/level1 \
    > "$OUT/stress_set_timing.txt" 2>&1
OUT="$OUT" timeout 150 bash bench/gpu_cold_eval.sh > /dev/null 2>&1
cat "$OUT/stress_set_timing.txt"
cat "$OUT/cold_eval.txt"; grep -h -A3 "^phases" "$OUT"/eval_*.txt
