#!/usr/bin/env bash
# One device call (< 10 min): issue 22's GPU acceptance. Our profile's achieved
# bandwidth / FLOP rate against bytes or FLOPs over triton.testing.do_bench for
# the six examples and 13 KernelBench level-1 problems (target: within 10 %);
# Nsight Compute on the top kernel of the first 3 problems (or its exact
# reason for not running); a scripted fake-LLM evolve whose captured prompts
# must each show the parent's profile.
#   device run, carry [".kb"]: bash bench/gpu_profile_truth.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
(command -v ncu && ncu --version) > "$OUT/ncu_version.txt" 2>&1 || echo "ncu: not on PATH" >> "$OUT/ncu_version.txt"
KB_ARGS=(); [ -d .kb ] && KB_ARGS=(--kb .kb)
timeout ${TRUTH_S:-330} python bench/profile_truth.py --out "$OUT" "${KB_ARGS[@]}" --ncu 3 \
    > "$OUT/profile_truth_log.txt" 2>&1
echo "profile_truth exit $?"
tail -30 "$OUT/profile_truth_log.txt"
timeout ${EVOLVE_S:-240} python bench/profile_truth.py --evolve --out "$OUT" \
    > "$OUT/evolve_log.txt" 2>&1
echo "evolve check exit $?"
tail -20 "$OUT/evolve_log.txt"
