#!/usr/bin/env bash
# One device call (< 10 min), the fourth pass's last: CUDA builds with the
# judge's stand-ins (add_one, gelu with the torch/types.h try, gelu with its
# own PYBIND11_MODULE, which skips the try), the CUDA build GPU test, then the
# throughput corpus one job at a time (the standby started once a first
# worker is warm), KernelBench's harness and the CLI's cold and served evals.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 200 python bench/cuda_build_speed.py --out "$OUT" --no-phases --variants fast \
    --candidates add_one gelu bench/kernels/cuda_gelu_pybind.py > "$OUT/cuda_build.txt" 2>&1
timeout 100 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_cuda_build.py \
    > "$OUT/pytest_cuda_gpu.txt" 2>&1
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout 220 python bench/throughput.py --kb .kb --out "$OUT" --phases pool1 kb cli "$@" \
    > "$OUT/throughput.txt" 2>&1
tail -8 "$OUT/cuda_build.txt"
grep -E "passed|failed|error" "$OUT/pytest_cuda_gpu.txt" | tail -3
grep -A60 '"pool1"' "$OUT/throughput.txt" | grep -E '"(per_hour|wall_s|right|warm_passed|warm_beyond_timed_median_s|median_wall_s|rc|on_service)"|_caches|service_|"kb"|"cli"' | head -40
