#!/usr/bin/env bash
# One device call (< 10 min), issue 20's acceptance run: KernelBench's harness
# (one process per candidate, dealt so any prefix holds Triton and CUDA in the
# corpus's proportion, a time budget KB_S; its rate on the corpus's mix from
# each backend's mean time), then
# `kernelevo suite` with its defaults over the same corpus
# (bench/kernelbench/manifest.toml), cut at SUITE_S, with the machine's load,
# the GPU's use (every 5 s) and CPU seconds by kind of process
# (bench/cpu_by_role.py) sampled. Results in $OUT/suite_accept.tgz.
#   device run, carry [".kb", ".whl"]: bash bench/gpu_suite_accept.sh
#   (SUITE_ARGS: more `kernelevo suite` flags, e.g. "--lanes 8"; SKIP_KB=1: the suite alone)
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
rm -rf /tmp/sa && mkdir -p /tmp/sa
pack() {  # what there is so far, in one archive (a call cut short still returns it)
    tar czf /tmp/sa_pack.tgz --exclude='*.db' --exclude='*.db-wal' --exclude='tasks' \
        --exclude='solutions' --exclude='problems' -C /tmp sa 2>/dev/null \
        && mv /tmp/sa_pack.tgz "$OUT/suite_accept.tgz"
}
(while sleep 30; do pack; done) & packer=$!
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > /tmp/sa/gpu.txt 2>&1
python -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)" >> /tmp/sa/gpu.txt 2>&1
if [ -z "${SKIP_KB:-}" ]; then
    # room past the budget for the candidate in hand (a CUDA build: up to ~70 s)
    timeout $(( ${KB_S:-100} + 100 )) python bench/suite_throughput.py --kb .kb --out /tmp/sa/kb \
        --phases kb --kb-budget-s ${KB_S:-100} --kb-stratified > /tmp/sa/kb_log.txt 2>&1
    echo "kb exit $?"; tail -2 /tmp/sa/kb_log.txt
fi
(while true; do
    read -r cpu a b c d rest < /proc/stat; sleep 5
    read -r cpu2 a2 b2 c2 d2 rest2 < /proc/stat
    echo "$(date +%s) load=$(cut -d' ' -f1 /proc/loadavg) cpu=$(( (a2+b2+c2-a-b-c) * 100 / (a2+b2+c2+d2-a-b-c-d+1) ))% gpu=$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null)"
done) > /tmp/sa/load.txt 2>&1 & sampler=$!
python bench/cpu_by_role.py --out /tmp/sa/cpu_by_role.json --interval 2 & roles=$!
timeout $(( ${SUITE_S:-400} + 40 )) python bench/suite_throughput.py --kb .kb --out /tmp/sa/suite \
    --phases suite --suite-timeout-s ${SUITE_S:-400} --suite-args "${SUITE_ARGS:-}" \
    > /tmp/sa/suite_log.txt 2>&1
echo "suite exit $?"; tail -3 /tmp/sa/suite_log.txt
kill $sampler; kill -TERM $roles; sleep 3
cat /tmp/sa/cpu_by_role.json | python -c "import json,sys; print(json.load(sys.stdin)['cpu_s'])"
kill $packer; pack
ls -la "$OUT"
