#!/usr/bin/env bash
# One device call: the worker goes on as the oracle's last message comes.
# A cold `eval` step by step (bench/cold_timeline.py, three fresh processes
# after a first one fills the caches), the CLI's cold `eval --local` as
# committed (bench/gpu_cold_eval.sh), then the throughput corpus one and
# three jobs at a time beside KernelBench's harness (timing counted on the
# task's own sets since this session).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for i in 0 1 2 3; do
    timeout 120 python bench/cold_timeline.py >> "$OUT/cold_timeline.txt" 2>&1
    echo "--" >> "$OUT/cold_timeline.txt"
done
OUT="$OUT" timeout 150 bash bench/gpu_cold_eval.sh > /dev/null 2>&1
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout 330 python bench/throughput.py --kb .kb --out "$OUT" --phases pool1 pool3 kb "$@" \
    > "$OUT/throughput.txt" 2>&1
tail -45 "$OUT/cold_timeline.txt"
cat "$OUT/cold_eval.txt"; grep -h -A3 "^phases" "$OUT"/eval_warm*.txt
python - "$OUT/throughput.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
for name, phase in data.items():
    if isinstance(phase, dict) and "per_hour" in phase:
        print(name, {k: phase.get(k) for k in ("per_hour", "wall_s", "right", "candidates", "warm_passed",
                                               "warm_beyond_timed_median_s", "median_wall_s")})
    elif isinstance(phase, dict):
        print(name, {k: v for k, v in phase.items() if k != "rows" and not isinstance(v, (list, dict))})
PY
