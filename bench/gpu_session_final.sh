#!/usr/bin/env bash
# One device call (< 10 min): GPU crash paths through the judge's sessions,
# four jobs at once on one GPU, where a cold eval's time goes, CUDA build speed.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 120 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_fixtures.py \
    -k "illegal_address or gpu_oom or race_reduction" > "$OUT/pytest_fixtures.txt" 2>&1
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout 150 python bench/throughput.py --kb .kb --out "$OUT" --phases pool4 \
    --only 19 20 21 22 23 24 26 29 30 38 > "$OUT/throughput.txt" 2>&1
timeout 90 python bench/cold_start.py --out "$OUT" > "$OUT/cold_start.txt" 2>&1
if [ -f bench/cuda_build_speed.py ]; then
    timeout 200 python bench/cuda_build_speed.py --out "$OUT" --no-phases > "$OUT/cuda_build.txt" 2>&1
fi
tail -3 "$OUT/pytest_fixtures.txt"; tail -25 "$OUT/throughput.txt"; cat "$OUT/cold_start.txt"
tail -30 "$OUT/cuda_build.txt" 2>/dev/null
