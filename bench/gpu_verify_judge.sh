#!/usr/bin/env bash
# The GPU checks of the judge's fixes (issue 8), in one device call of < 10 min:
# the timing tests, the Triton fixtures that failed or that profile timing
# affects, then the KernelBench batch. Each step has its own limit and writes
# its log under $OUT, so a step cut off leaves the others' results.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 150 python -m pytest -m gpu -q -rA --durations=0 tests/test_timing_gpu.py 2>&1 \
    | tail -40 | tee "$OUT/pytest_timing.txt"
timeout 200 python -m pytest -m gpu -q -rA --durations=0 tests/test_fixtures.py \
    -k "race_reduction or side_stream and not cuda or graph_replay" 2>&1 \
    | tail -40 | tee "$OUT/pytest_fixtures.txt"
bash bench/kernelbench/setup_device.sh
timeout 230 python bench/kernelbench_batch.py --kb .kb --out /tmp/kb --timers-timeout 100 \
    --kernelbench-timeout 190 --only "$@" 2>&1 | tail -60 | tee "$OUT/kb_batch.txt"
# Eight files at most come back: the batch's summary only (its problem files stay).
cp /tmp/kb/kernelbench_batch.json /tmp/kb/kernelbench_batch.md "$OUT/" 2>/dev/null
