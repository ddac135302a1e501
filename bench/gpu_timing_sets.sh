#!/usr/bin/env bash
# One device call: times counted on the task's own input sets, not the stress
# set. The GPU timing tests (a value-dependent contestant; the softmax
# example's spreads), then bench/timing_semantics.py (our measures against
# do_bench, a loop and KernelBench's protocol, with each contestant's IQR).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 200 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_timing_gpu.py \
    > "$OUT/pytest_timing_gpu.txt" 2>&1
timeout 330 python bench/timing_semantics.py --out "$OUT" > "$OUT/timing_semantics.txt" 2>&1
grep -E "passed|failed|error|Error|assert" "$OUT/pytest_timing_gpu.txt" | tail -12
cat "$OUT/timing_semantics.txt" | tail -25
