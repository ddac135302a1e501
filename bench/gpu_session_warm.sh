#!/usr/bin/env bash
# One device call (< 10 min): the GPU tests that failed under TRITON_INTERPRET=1,
# then bench/throughput.py (warm judging, pipelining, KernelBench's harness, CLI).
# Each step has its own limit and writes straight into $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
python -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
timeout 170 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_timing_gpu.py \
    > "$OUT/pytest_timing.txt" 2>&1
timeout 130 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_fixtures.py \
    -k "race_reduction or side_stream and not cuda_side" > "$OUT/pytest_fixtures.txt" 2>&1
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout 280 python bench/throughput.py --kb .kb --out "$OUT" "$@" > "$OUT/throughput.txt" 2>&1
tail -5 "$OUT/pytest_timing.txt" "$OUT/pytest_fixtures.txt"; tail -60 "$OUT/throughput.txt"
