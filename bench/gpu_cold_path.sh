#!/usr/bin/env bash
# One device call: the cold `eval` path once the judge warms its comparisons
# while the forkserver imports, and the forkserver preloads what a worker
# imports once candidates come. The judge's GPU tests and the crash fixtures
# through the sessions; a cold `eval` step by step (bench/cold_timeline.py,
# a first process fills the caches, then three); the CLI's cold
# `eval --local` (bench/gpu_cold_eval.sh); the throughput corpus one job at a
# time.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 200 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_judge_gpu.py \
    tests/test_fixtures.py -k "warms or cleanly or illegal_address or gpu_oom or race_reduction" \
    > "$OUT/pytest_gpu.txt" 2>&1
for i in 0 1 2 3; do
    timeout 120 python bench/cold_timeline.py >> "$OUT/cold_timeline.txt" 2>&1
    echo "--" >> "$OUT/cold_timeline.txt"
done
OUT="$OUT" timeout 150 bash bench/gpu_cold_eval.sh > /dev/null 2>&1
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout 150 python bench/throughput.py --kb .kb --out "$OUT" --phases pool1 "$@" \
    > /dev/null 2>&1
grep -E "passed|failed|error" "$OUT/pytest_gpu.txt" | tail -10
tail -21 "$OUT/cold_timeline.txt"; grep -h "^phases" "$OUT/cold_timeline.txt" | cut -c1-600
cat "$OUT/cold_eval.txt"; grep -h -A3 "^phases" "$OUT"/eval_warm*.txt
python - "$OUT/throughput.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
phase = data["pool1"]
print("pool1", {k: phase.get(k) for k in ("per_hour", "wall_s", "right", "candidates", "warm_passed",
                                          "warm_beyond_timed_median_s", "passed_phase_medians_s")})
PY
