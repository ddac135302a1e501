#!/usr/bin/env bash
# One device call (< 10 min) for what the first calls of 2026-12-02 (session 11) left:
# the CUDA build test fixed after the package move, the autotune budget on the GPU,
# the timing agreement on the small level-1 problems (both call loops), the profile
# rates against do_bench with ncu, and the model round trip at the small size.
# Everything lands in $OUT/recheck.tgz (the device returns at most 8 files).
#   device run, carry [".kb", ".whl"]: bash bench/gpu_recheck.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
work=/tmp/recheck; rm -rf $work; mkdir -p $work
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $work/gpu.txt 2>&1
step() { echo "== $1 exit $2 ($(date +%T))" | tee -a $work/steps.txt; }
timeout 120 python -m pytest -m gpu -q -p no:cacheprovider tests/test_cuda_build.py \
    tests/test_autotune_budget.py > $work/pytest_gpu.txt 2>&1
step pytest $?; tail -3 $work/pytest_gpu.txt
SMALL="12 19 20 21 22 23 24 25 26 27 28 29 31 32 47 48 49 51 52 95 96"
timeout ${AGREE_S:-170} python bench/kernelbench_batch.py --kb .kb --out $work/agree --honest-triton \
    --phases judge timers --timers-timeout 110 --only $SMALL > $work/agree_log.txt 2>&1
step agree $?
timeout ${TRUTH_S:-190} python bench/profile_truth.py --out $work/profile --kb .kb --ncu 3 \
    > $work/profile_truth_log.txt 2>&1
step profile_truth $?; tail -25 $work/profile_truth_log.txt
timeout ${E2E_S:-90} python bench/model_e2e.py --out $work/model_e2e_small_fp32 --precision fp32 \
    > $work/model_e2e_small_fp32.log 2>&1
step model_e2e $?; tail -12 $work/model_e2e_small_fp32.log
tar czf "$OUT/recheck.tgz" --exclude='*.db' --exclude='*.db-wal' -C /tmp recheck 2>/dev/null
cp $work/steps.txt $work/agree/kernelbench_batch.md "$OUT/" 2>/dev/null
python3 - $work/agree/kernelbench_batch.json <<'PY'
import json, sys
try:
    print(json.dumps(json.load(open(sys.argv[1]))["summary"], indent=0)[:2500])
except Exception as exc:
    print("no agreement summary:", exc)
PY
