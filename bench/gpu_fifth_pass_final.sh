#!/usr/bin/env bash
# One device call (< 10 min), the fifth pass's last: every GPU test, the
# throughput corpus one and three jobs at a time beside KernelBench's
# harness, then the CLI's cold `eval --local` twice (caches warm).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 280 python -m pytest -m gpu -rA -p no:cacheprovider > "$OUT/pytest_gpu.txt" 2>&1
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout 230 python bench/throughput.py --kb .kb --out "$OUT" --phases pool1 pool3 kb "$@" \
    > /dev/null 2>&1
TIMEFORMAT=%R
for label in warm1 warm2; do
    wall=$( { time timeout 30 python -m kernelevo.cli.app eval examples/softmax/task.py \
        examples/softmax/triton_candidate.py --local > "$OUT/eval_$label.txt" 2>&1 ; } 2>&1 )
    echo "$label: $wall s, exit $(grep -c passed "$OUT/eval_$label.txt") passed lines" >> "$OUT/cold_eval.txt"
done
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest_gpu.txt" | tail -32
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
