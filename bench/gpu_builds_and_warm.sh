#!/usr/bin/env bash
# One device call (< 10 min): GPU_NEXT rows 1 and 1c together.
#   1. the builds phase, machine cold, `broken` first: a failing CUDA build's
#      verdict against plain load_inline's, then a small extension cold and
#      another (bench/suite_throughput.py --phases builds);
#   2. a warm Triton candidate's wall beyond its timed work
#      (bench/gpu_standby_yield.sh on ten level-1 problems);
#   3. the GPU tests of the files named in GPU_TESTS (none by default; by
#      gpu_standby_yield.sh, their output in warm/gpu_tests.txt).
# Results in $OUT/builds_warm.tgz.
#   device run, carry [".kb", ".whl"]: bash bench/gpu_builds_and_warm.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
rm -rf /tmp/bw && mkdir -p /tmp/bw/builds /tmp/bw/warm
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > /tmp/bw/gpu.txt 2>&1
nproc >> /tmp/bw/gpu.txt
python -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)" >> /tmp/bw/gpu.txt 2>&1
start=$(date +%s)
timeout ${BUILDS_S:-300} python bench/suite_throughput.py --kb .kb --out /tmp/bw/builds --phases builds \
    --builds ${BUILDS:-broken,ok,other} > /tmp/bw/builds_log.txt 2>&1
echo "builds exit $? after $(( $(date +%s) - start )) s"; tail -4 /tmp/bw/builds_log.txt | cut -c1-3000
OUT=/tmp/bw/warm timeout ${WARM_S:-250} bash bench/gpu_standby_yield.sh --only ${WARM_ONLY:-19 20 21 22 23 24 26 29 30 38} --triton-only \
    > /tmp/bw/warm_log.txt 2>&1
echo "warm exit $? after $(( $(date +%s) - start )) s"; cat /tmp/bw/warm_log.txt | tail -12
echo "all done after $(( $(date +%s) - start )) s"
tar czf "$OUT/builds_warm.tgz" --exclude='*.db' -C /tmp bw
ls -la "$OUT"
