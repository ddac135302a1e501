#!/usr/bin/env bash
# One device call (< 10 min), issue 20: `kernelevo suite` over the corpus of
# bench/kernelbench/manifest.toml once per entry of LANES ("auto": the default
# lanes; each run cut at SUITE_S), the machine's load and the GPU's use sampled
# every 5 s, then the cold CUDA builds (the judge's prebuild against plain
# load_inline; BUILDS=ok,other,broken, empty for none).
# Results in $OUT/suite_lanes.tgz.
#   device run, carry [".kb", ".whl"]: bash bench/gpu_suite_lanes.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
rm -rf /tmp/sl && mkdir -p /tmp/sl
sample() {  # load average, busy CPU %, GPU use % every 5 s into $1
    while true; do
        read -r cpu a b c d rest < /proc/stat; sleep 5
        read -r cpu2 a2 b2 c2 d2 rest2 < /proc/stat
        busy=$(( (a2+b2+c2 - a-b-c) * 100 / (a2+b2+c2+d2 - a-b-c-d + 1) ))
        echo "$(date +%s) load=$(cut -d' ' -f1 /proc/loadavg) cpu=${busy}% gpu=$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null)" >> "$1"
    done
}
for lanes in ${LANES:-auto}; do
    flag=""; [ "$lanes" != auto ] && flag="--lanes $lanes"
    sample /tmp/sl/load_lanes$lanes.txt & sampler=$!
    timeout $(( ${SUITE_S:-150} + 25 )) python bench/suite_throughput.py --kb .kb \
        --out /tmp/sl/lanes$lanes --phases suite --suite-timeout-s ${SUITE_S:-150} \
        --suite-args="$flag ${SUITE_EXTRA:-}" > /tmp/sl/lanes${lanes}_log.txt 2>&1
    echo "suite lanes=$lanes exit $?"; tail -2 /tmp/sl/lanes${lanes}_log.txt
    kill $sampler 2>/dev/null
done
if [ -n "${BUILDS-ok,other,broken}" ]; then
    timeout ${BUILDS_S:-240} python bench/suite_throughput.py --kb .kb --out /tmp/sl/builds --phases builds \
        --builds "${BUILDS-ok,other,broken}" \
        > /tmp/sl/builds_log.txt 2>&1
    echo "builds exit $?"; tail -3 /tmp/sl/builds_log.txt
fi
tar czf "$OUT/suite_lanes.tgz" --exclude='*.db' --exclude='*.db-wal' --exclude='tasks' \
    --exclude='solutions' -C /tmp sl 2>/dev/null
ls -la "$OUT"
