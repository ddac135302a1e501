#!/usr/bin/env bash
# One device call (< 10 min): every GPU-marked test, file by file, each under its
# own limit, so a hang in one leaves the others' results; after one confined
# eval whose verdict names the isolation layers in force on the GPU machine.
#   device run, carry [".kb", ".whl"]: bash bench/gpu_all_tests.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
summary="$OUT/gpu_tests_summary.txt"
: > "$summary"
# the confined eval first: it is short, and a later hang must not lose it
timeout 100 python -m kernelevo.cli.app eval examples/softmax/task.py \
    examples/softmax/triton_candidate.py --local --json > "$OUT/confined_eval.json" \
    2> "$OUT/confined_eval_err.txt"
echo "confined eval exit $?" | tee -a "$summary"
python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print(v['status'], v['reason']); print(v['isolation']); print(v['environment'].get('timed_under'))" "$OUT/confined_eval.json" 2>&1 | tee -a "$summary"
for file in $(grep -l "pytest.mark.gpu\|mark.gpu" tests/test_*.py); do
    timeout ${FILE_S:-150} python -m pytest -m gpu -q -p no:cacheprovider "$file" \
        > /tmp/gpu_test_log.txt 2>&1
    code=$?
    echo "$file exit $code: $(tail -1 /tmp/gpu_test_log.txt)" | tee -a "$summary"
    [ $code -ne 0 ] && [ $code -ne 5 ] && tail -30 /tmp/gpu_test_log.txt >> "$OUT/gpu_tests_failures.txt"
done
