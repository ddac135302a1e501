#!/usr/bin/env bash
# One device call (< 10 min), session 17, after the fixes: the warm evaluation again.
#   1. a fresh worker's first call (bench/first_call_profile.py: whether the
#      forkserver's children now find Triton's source hash computed);
#   2. `eval` through `serve`, pauses 0 0 4 4 4 4 4 (bench/gpu_standby_yield.sh);
#   3. the judge's timing steps, the service's settings (bench/worker_timing_cost.py);
#   4. the GPU tests of GPU_TESTS.
# Results in $OUT/s17b.tgz, packed after each step.
#   device run, carry [".kb", ".whl"]: bash bench/gpu_session17b.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
R=/tmp/s17b
rm -rf $R && mkdir -p $R
pack() { tar czf "$OUT/s17b.tgz" -C /tmp s17b; }
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > $R/gpu.txt 2>&1
python -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)" >> $R/gpu.txt 2>&1
timeout ${FIRST_S:-120} python bench/first_call_profile.py --out $R/first_call > $R/first_call_log.txt 2>&1
echo "first_call exit $? after $(( $(date +%s) - start )) s"; grep -v Warning $R/first_call_log.txt | cut -c1-300
pack
mkdir -p $R/service
GPU_TESTS= OUT=$R/service SERVICE_PAUSES="${SERVICE_PAUSES:-0 0 4 4 4 4 4}" SKIP_POOL=1 \
    timeout ${SERVICE_S:-120} bash bench/gpu_standby_yield.sh > $R/service_log.txt 2>&1
echo "service exit $? after $(( $(date +%s) - start )) s"
python - $R/service/service.txt <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); p = r["phases"]
    print(r["pause_s"], r["wall_s"], r["reason"], r["baselines"], {k: p.get(k) for k in (
        "total", "timing", "timing_gpu", "timing_call", "gate_wait", "recheck_first_call",
        "first_call", "correctness", "profile", "exit", "oracle_exit")})
PY
pack
timeout ${WTC_S:-120} python bench/worker_timing_cost.py --out $R/wtc --jobs 4 --variants service > $R/wtc_log.txt 2>&1
echo "worker_timing_cost exit $? after $(( $(date +%s) - start )) s"; grep '^{' $R/wtc_log.txt | cut -c1-400
pack
for file in ${GPU_TESTS:-}; do
    timeout ${TEST_S:-150} python -m pytest -m gpu -q -p no:cacheprovider "$file" >> $R/gpu_tests.txt 2>&1
    echo "$file exit $? after $(( $(date +%s) - start )) s: $(tail -1 $R/gpu_tests.txt)"
    pack
done
ls -la "$OUT"
