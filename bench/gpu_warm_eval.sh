#!/usr/bin/env bash
# One short device call: warm Triton evaluations.
#   1. `eval` of the softmax example through `kernelevo serve`, once per word of
#      SERVICE_PAUSES (seconds to wait first: 0 sends jobs back to back, a few
#      seconds is a search waiting for its model), each eval's wall and phases
#      (the re-check's own too, recheck_*) a line of $OUT/service.txt;
#   2. unless SKIP_POOL is set, the throughput corpus one job at a time
#      (bench/throughput.py pool1 with this script's arguments, e.g.
#      `--only 19 20 --triton-only`): warm_beyond_timed_median_s;
#   3. the GPU tests of the files named in GPU_TESTS (none by default).
# EVAL_ARGS: more arguments of each `eval` (e.g. --config FILE); SERVICE_TXT: the
# file under $OUT for step 1 (service.txt). PYSPY: a py-spy executable; each eval
# from the PYSPY_FROM-th (3) on then runs under it (the client, $OUT/pyspy_client_N.txt) while
# it samples the service and its children ($OUT/pyspy_service_N.txt), wall-clock
# samples (--idle) as collapsed stacks.
#   device run, carry [".kb", ".whl"]: SERVICE_PAUSES="0 4 4 4 4 4" SKIP_POOL=1 bash bench/gpu_warm_eval.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python -m kernelevo.cli.app serve > "$OUT/serve.txt" 2>&1 &
SERVER=$!
for i in $(seq 100); do [ -f "$KERNELEVO_CACHE_DIR/service.json" ] && break; sleep 0.2; done
TIMEFORMAT=%R
job=0
for pause in ${SERVICE_PAUSES:-0 0 0}; do
    sleep "$pause"
    job=$((job + 1))
    client=""
    if [ -n "${PYSPY:-}" ] && [ $job -ge ${PYSPY_FROM:-3} ]; then
        "$PYSPY" record -p $SERVER --subprocesses --idle --rate 250 --format raw -d 6 \
            -o "$OUT/pyspy_service_$job.txt" > "$OUT/pyspy_service_$job.log" 2>&1 &
        SPY=$!
        sleep 1
        client="$PYSPY record --idle --rate 250 --format raw -o $OUT/pyspy_client_$job.txt --"
    fi
    wall=$( { time timeout 60 $client python -m kernelevo.cli.app eval examples/softmax/task.py \
        examples/softmax/triton_candidate.py --json ${EVAL_ARGS:-} > /tmp/service_eval.json \
        2>/dev/null ; } 2>&1 )
    [ -n "$client" ] && wait $SPY
    python - "$pause" "$wall" /tmp/service_eval.json >> "$OUT/${SERVICE_TXT:-service.txt}" <<'PY'
import json, sys
pause, wall, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
try:  # py-spy, when the client runs under it, may add its own lines
    verdict = json.loads("\n".join(line for line in open(path) if not line.startswith("py-spy>")))
except ValueError:
    verdict = {"reason": "no verdict"}
print(json.dumps({"pause_s": float(pause), "wall_s": wall, "reason": verdict.get("reason"),
                  "baselines": verdict.get("environment", {}).get("baselines"),
                  "baseline_notes": [n for n in verdict.get("notes", []) if "drift" in n],
                  "phases": verdict.get("phases_s", {})}))
PY
done
kill $SERVER; wait $SERVER 2>/dev/null
cut -c1-300 "$OUT/${SERVICE_TXT:-service.txt}"
if [ -z "${SKIP_POOL:-}" ]; then
    bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
    timeout ${POOL_S:-160} python bench/throughput.py --kb .kb --out "$OUT" --phases pool1 "$@" \
        > "$OUT/throughput_log.txt" 2>&1
    echo "throughput exit $?"; tail -3 "$OUT/throughput_log.txt"
    python - "$OUT/throughput.json" <<'PY'
import json, sys
phase = json.load(open(sys.argv[1]))["pool1"]
print("pool1", {k: phase.get(k) for k in ("per_hour", "wall_s", "right", "candidates", "warm_passed",
                                          "warm_beyond_timed_median_s", "passed_phase_medians_s")})
PY
fi
for file in ${GPU_TESTS:-}; do
    timeout 150 python -m pytest -m gpu -q -p no:cacheprovider "$file" >> "$OUT/gpu_tests.txt" 2>&1
    echo "$file exit $?: $(tail -1 "$OUT/gpu_tests.txt")"
done
