#!/usr/bin/env bash
# One device call (< 10 min), session 17: where the warm evaluation's time goes.
#   1. a fresh worker's first call of the softmax example under cProfile, at
#      the re-check's sizes and the task's (bench/first_call_profile.py);
#   2. `eval` through `serve`, pauses 0 0 4 4 4 4 4; the last three under
#      py-spy, the client and the service's process tree sampled
#      (bench/gpu_standby_yield.sh, PYSPY);
#   3. the worker's per-sample cost, four variants (bench/worker_timing_cost.py).
# Results in $OUT/s17.tgz, packed after each step.
#   device run, carry [".kb", ".whl", ".pyspy"]: bash bench/gpu_session17.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
R=/tmp/s17
rm -rf $R && mkdir -p $R
pack() { tar czf "$OUT/s17.tgz" -C /tmp s17; }
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > $R/gpu.txt 2>&1
nproc >> $R/gpu.txt
python -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)" >> $R/gpu.txt 2>&1
python -m pip install -q --no-deps .pyspy/*.whl > $R/pyspy_install.txt 2>&1
PYSPY=$(python -c "import shutil, sys, os; print(shutil.which('py-spy') or os.path.join(os.path.dirname(sys.executable), 'py-spy'))")
echo "py-spy: $PYSPY $($PYSPY --version 2>&1)" | tee -a $R/gpu.txt
timeout ${FIRST_S:-150} python bench/first_call_profile.py --out $R/first_call > $R/first_call_log.txt 2>&1
echo "first_call exit $? after $(( $(date +%s) - start )) s"; cut -c1-250 $R/first_call_log.txt
pack
mkdir -p $R/service
OUT=$R/service SERVICE_PAUSES="0 0 4 4 4 4 4" PYSPY_FROM=5 PYSPY=$PYSPY SKIP_POOL=1 \
    timeout ${SERVICE_S:-150} bash bench/gpu_standby_yield.sh > $R/service_log.txt 2>&1
echo "service exit $? after $(( $(date +%s) - start )) s"; cut -c1-200 $R/service_log.txt
pack
timeout ${WTC_S:-240} python bench/worker_timing_cost.py --out $R/wtc --jobs 4 > $R/wtc_log.txt 2>&1
echo "worker_timing_cost exit $? after $(( $(date +%s) - start )) s"
python - $R/wtc_log.txt <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        row = json.loads(line)
    except ValueError:
        print(line.rstrip()[:200]); continue
    print({k: row.get(k) for k in ("variant", "job", "reason", "wall_s", "total", "timing", "timing_gpu", "timing_call", "gate_wait", "gpu_samples")})
PY
pack
ls -la "$OUT"
