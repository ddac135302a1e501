#!/usr/bin/env bash
# Every GPU stretch's first run (< 9 minutes on an H100 or H200): the GPU tests,
# the speed agreement with a plain process, Nsight Compute profiles of the
# bundled examples, the model example end to end, and a summary printed last.
#
#   device run, carry [".kb0", ".plain"], timeout_s 600:
#       bash bench/gpu_accept.sh
#
# .kb0 is KernelBench before its July 2025 resize (bench/kernelbench/README.md
# says how to make it); .plain holds a copy of ../shared/tools/plain_timing.py.
# Steps run under their own limits, so one that hangs leaves the others'
# results. Everything lands in $OUT (default /tmp/gpu_accept): summary.txt,
# gpu_tests.txt, agreement.md/.json, profiles.txt, model_e2e.md/.json,
# and logs.tgz with every log.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=src
export KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-accept-cache}
OUT=${OUT:-/tmp/gpu_accept}
LOGS=/tmp/gpu_accept_logs
mkdir -p "$OUT" "$LOGS"
summary="$OUT/summary.txt"
started=$(date +%s)
BUDGET_S=${BUDGET_S:-520}  # the whole run, so the summary comes back inside a 9-minute call
stamp() { echo "[$(( $(date +%s) - started )) s] $*" | tee -a "$summary"; }
# seconds a step may take: its own limit, or what is left of the budget if less
limit() { local left=$(( BUDGET_S - ($(date +%s) - started) )); [ "$left" -lt 5 ] && left=5
          [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }

: > "$summary"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
    | tee -a "$summary"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
    | tee -a "$summary"
# the core timings run on, kept free with its hyperthread siblings (evaluate/shared/cores.py)
python3 -c "import torch; from kernelevo.evaluate.shared.cores import timing_cores, siblings; \
kept = timing_cores(torch.cuda.device_count()); \
print('timing cores', kept, 'with siblings', [sorted(siblings(c)) for c in kept])" \
    | tee -a "$summary"

# 1. GPU tests: one pytest run over every gpu-marked test
stamp "gpu tests"
# -v: a test's line is written as it ends, so a run cut by its limit still says which passed
timeout $(limit ${TESTS_S:-300}) python3 -m pytest -m gpu -v -p no:cacheprovider --durations=15 \
    --tb=short -rfE -o addopts="" tests > "$OUT/gpu_tests.txt" 2>&1
code=$?
stamp "gpu tests exit $code: $(grep -c ' PASSED' "$OUT/gpu_tests.txt") passed, \
$(grep -c ' FAILED' "$OUT/gpu_tests.txt") failed; $(grep -E '(passed|failed).* in [0-9.]+s' "$OUT/gpu_tests.txt" | tail -1)"

# 2. speed agreement with plain_timing.py (a subset of bench/speed_agreement.py's pairs)
stamp "speed agreement"
# three pairs, one plain run each: 64 s on an H100 (suite 14 s, plain 50 s)
timeout $(limit ${AGREE_S:-100}) python3 bench/speed_agreement.py --kb .kb0 --out "$LOGS/agree" \
    --plain .plain/plain_timing.py --runs ${AGREE_RUNS:-1} \
    --only ${AGREE_ONLY:-l1_19,l2_57,l2_20} > "$LOGS/agree.log" 2>&1
stamp "speed agreement exit $?"
cp "$LOGS/agree/agreement.md" "$LOGS/agree/agreement.json" "$OUT/" 2>/dev/null
grep -E "^- " "$OUT/agreement.md" 2>/dev/null | tee -a "$summary"

# 3. Nsight Compute on every bundled example with a Triton candidate, three at a
# time (about 20 s each alone; Nsight Compute takes its own lock to replay kernels,
# so only the rest overlaps). The kernel tables' times are not figures of record.
stamp "profiles"
: > "$OUT/profiles.txt"
profile_limit=$(limit 90)
for task in examples/*/task.py; do
    folder=$(dirname "$task")
    candidate=$(ls "$folder"/triton_candidate*.py 2>/dev/null | head -1)
    [ -n "$candidate" ] || continue
    name=$(basename "$folder")
    ( timeout "$profile_limit" python3 -m kernelevo.cli.app profile "$task" "$candidate" \
          > "$LOGS/profile_$name.txt" 2>&1; echo $? > "$LOGS/profile_$name.exit" ) &
    while [ "$(jobs -rp | wc -l)" -ge 3 ]; do sleep 1; done
done
wait
for log in "$LOGS"/profile_*.txt; do
    name=$(basename "$log" .txt); name=${name#profile_}
    cat "$log" >> "$OUT/profiles.txt"
    ncu_line=$(grep -iE "^ncu |nsight compute" "$log" | head -1)
    stamp "profile $name exit $(cat "$LOGS/profile_$name.exit"): ${ncu_line:0:140}"
done

# 4. the model example end to end
if [ -f bench/model_e2e_accept.py ]; then
    stamp "model end to end"
    timeout $(limit ${MODEL_S:-120}) python3 bench/model_e2e_accept.py --out "$LOGS/model" \
        > "$LOGS/model.log" 2>&1
    stamp "model end to end exit $?"
    cp "$LOGS/model"/*.md "$LOGS/model"/*.json "$OUT/" 2>/dev/null
fi

tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
stamp "done"
echo
cat "$summary"
