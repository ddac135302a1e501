#!/usr/bin/env bash
# One device call (< 10 min): the timing agreement table of issue 19 (our
# measures against independent ones in a plain process, KernelBench levels 1
# and 2, convolutions included) and the timing GPU tests.
#   device run, carry [".kb", ".whl"]: bash bench/gpu_timing_agreement.sh
# AGREE_S, TESTS_S: the two steps' limits in seconds (420, 140). Results: $OUT/kernelbench_batch.md
# (the table; bench/agreement_rows.py $OUT reads the raw rows of a run cut short).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
work=/tmp/agree; rm -rf $work
L1="19_relu__honest.py 21_sigmoid__honest.py 23_softmax__honest.py 26_gelu__honest.py
    36_rmsnorm__honest.py 40_layernorm__honest.py 47_sum_dim__honest.py 88_mingpt_gelu__honest.py"
L2=$(python3 -c "import tomllib; e=tomllib.load(open('bench/kernelbench/manifest.toml','rb'))['candidate']; print(' '.join(x['problem'] for x in e if x['problem'].startswith('level2') and x['kind']=='honest' and x.get('backend','triton')=='triton'))")
timeout ${AGREE_S:-420} python bench/kernelbench_batch.py --kb .kb --out $work --honest-triton \
    --phases judge timers --timers-timeout 200 --only $L1 $L2 > "$OUT/agree_log.txt" 2>&1
cp $work/kernelbench_batch.json $work/kernelbench_batch.md $work/judge.jsonl $work/timers.jsonl "$OUT/" 2>/dev/null
timeout ${TESTS_S:-140} python -m pytest -m gpu -q -p no:cacheprovider tests/test_timing_gpu.py \
    tests/test_shapes.py > "$OUT/pytest_gpu.txt" 2>&1
tail -3 "$OUT/pytest_gpu.txt"
grep -E "^judge " "$OUT/agree_log.txt" | awk '{print $2, $3, $4, $5}' | tail -50
python3 - "$OUT/kernelbench_batch.json" <<'PY'
import json, sys
try:
    print(json.dumps(json.load(open(sys.argv[1]))["summary"], indent=0)[:3000])
except Exception as exc:
    print("no summary:", exc)
PY
