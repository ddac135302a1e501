#!/usr/bin/env bash
# One device call (< 10 min), issue 20: KernelBench's harness (one process per
# candidate, a time budget), then `kernelevo suite` twice over the same corpus
# (bench/kernelbench/manifest.toml): its defaults (eager and torch.compile
# baselines) and with --no-compile (eager only, the one baseline the harness
# times). Rows carry each verdict's phases. Results in $OUT/suite_compare.tgz.
#   device run, carry [".kb", ".whl"]: bash bench/gpu_suite_compare.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
rm -rf /tmp/sc && mkdir -p /tmp/sc
timeout ${KB_T:-130} python bench/suite_throughput.py --kb .kb --out /tmp/sc/kb --phases kb \
    --kb-budget-s ${KB_S:-100} > /tmp/sc/kb_log.txt 2>&1
echo "kb exit $?"; tail -2 /tmp/sc/kb_log.txt
for run in default no_compile; do
    extra=""; [ $run = no_compile ] && extra="--no-compile"
    timeout $(( ${SUITE_S:-165} + 25 )) python bench/suite_throughput.py --kb .kb \
        --out /tmp/sc/$run --phases suite --suite-timeout-s ${SUITE_S:-165} \
        --suite-args="$extra" > /tmp/sc/${run}_log.txt 2>&1
    echo "suite $run exit $?"; tail -3 /tmp/sc/${run}_log.txt
done
tar czf "$OUT/suite_compare.tgz" --exclude='*.db' --exclude='*.db-wal' --exclude='tasks' \
    --exclude='solutions' -C /tmp sc 2>/dev/null
ls -la "$OUT"
