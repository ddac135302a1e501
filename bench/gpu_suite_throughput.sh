#!/usr/bin/env bash
# One device call (< 10 min), issue 20: a confined eval first (the sandbox on
# the GPU), then bench/suite_throughput.py: cold CUDA builds, KernelBench's
# harness (one process per candidate, a time budget), then `kernelevo suite`
# over the whole corpus of bench/kernelbench/manifest.toml.
#   device run, carry [".kb", ".whl"]: bash bench/gpu_suite_throughput.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout 100 python -m kernelevo.cli.app eval examples/softmax/task.py \
    examples/softmax/triton_candidate.py --local --json > "$OUT/probe.json" 2> "$OUT/probe_err.txt"
probe=$?
echo "confined eval: exit $probe"
python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print(v.get('reason'), '|', v.get('isolation')); print(v.get('environment', {}).get('timed_under'))" "$OUT/probe.json" 2>/dev/null | head -3
if [ $probe -ne 0 ]; then
    tail -5 "$OUT/probe_err.txt"
    echo "the confined eval failed: the suite below runs with KERNELEVO_CONFINE=0"
    export KERNELEVO_CONFINE=0
fi
timeout ${ST_S:-470} python bench/suite_throughput.py --kb .kb --out /tmp/st --phases ${PHASES:-builds kb suite} \
    --kb-budget-s ${KB_S:-110} --suite-timeout-s ${SUITE_S:-250} > "$OUT/st_log.txt" 2>&1
cp /tmp/st/suite_throughput.json /tmp/st/suite_log.txt /tmp/st/suite/results.jsonl "$OUT/" 2>/dev/null
tail -8 "$OUT/st_log.txt"
