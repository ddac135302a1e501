#!/usr/bin/env bash
# One device call (< 10 min): CUDA builds with and without the torch/types.h
# try (bench/cuda_build_speed.py, variants as_written and fast; the gelu
# example, add_one, and gelu with its binding in the .cu, which falls back),
# then the CUDA build GPU tests and the several-candidates tests on the GPU.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nproc > "$OUT/machine.txt"; nvcc --version | tail -2 >> "$OUT/machine.txt"
timeout 330 python bench/cuda_build_speed.py --out "$OUT" --no-phases \
    --variants as_written fast \
    --candidates add_one gelu bench/kernels/cuda_gelu_pybind.py > "$OUT/cuda_build.txt" 2>&1
timeout 120 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_cuda_build.py \
    > "$OUT/pytest_cuda_gpu.txt" 2>&1
timeout 120 python -m pytest -m "not gpu" -rA -p no:cacheprovider tests/test_several_candidates.py \
    > "$OUT/pytest_several.txt" 2>&1
tail -12 "$OUT/cuda_build.txt"
grep -E "passed|failed|error" "$OUT/pytest_cuda_gpu.txt" | tail -4
grep -E "passed|failed|error" "$OUT/pytest_several.txt" | tail -4
