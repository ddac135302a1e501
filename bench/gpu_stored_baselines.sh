#!/usr/bin/env bash
# One device call (about 6 min): baselines timed once per task and reused (issue 20).
#   1. the GPU tests of the store, the judge and the shapes (gpu_tests.txt);
#   2. warm `eval` of the softmax example through `kernelevo serve`, with the
#      store (service_stored.txt) and without it (service_beside.txt, every
#      baseline beside every candidate), five jobs each (0 0 4 4 4 s apart).
#   device run, carry [".kb", ".whl"]: bash bench/gpu_stored_baselines.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for file in ${GPU_TESTS:-tests/test_baseline_store_gpu.py tests/test_judge_gpu.py tests/test_shapes.py}; do
    timeout 200 python -m pytest -m gpu -q -p no:cacheprovider "$file" >> "$OUT/gpu_tests.txt" 2>&1
    echo "$file exit $?: $(tail -1 "$OUT/gpu_tests.txt")"
done
beside=/tmp/beside.toml
printf '[eval.timing]\nstored_baselines = false\n' > $beside
SERVICE_PAUSES="0 0 4 4 4" SKIP_POOL=1 SERVICE_TXT=service_stored.txt OUT=$OUT \
    bash bench/gpu_standby_yield.sh
SERVICE_PAUSES="0 0 4 4 4" SKIP_POOL=1 SERVICE_TXT=service_beside.txt OUT=$OUT \
    EVAL_ARGS="--config $beside" bash bench/gpu_standby_yield.sh
