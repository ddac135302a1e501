#!/usr/bin/env bash
# One short device call: a standby's warm-up waits for the evaluation beside
# it to time. `eval` three times through `kernelevo serve`, then the
# throughput corpus one job at a time.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python -m kernelevo.cli.app serve > "$OUT/serve.txt" 2>&1 &
SERVER=$!
for i in $(seq 100); do [ -f "$KERNELEVO_CACHE_DIR/service.json" ] && break; sleep 0.2; done
TIMEFORMAT=%R
for label in service1 service2 service3; do
    wall=$( { time timeout 60 python -m kernelevo.cli.app eval examples/softmax/task.py \
        examples/softmax/triton_candidate.py > "$OUT/eval_$label.txt" 2>&1 ; } 2>&1 )
    echo "$label: $wall s, $(grep -c passed "$OUT/eval_$label.txt") passed lines" >> "$OUT/service.txt"
done
kill $SERVER; wait $SERVER 2>/dev/null
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout ${POOL_S:-160} python bench/throughput.py --kb .kb --out "$OUT" --phases pool1 "$@" \
    > "$OUT/throughput_log.txt" 2>&1
echo "throughput exit $?"; tail -3 "$OUT/throughput_log.txt"
cat "$OUT/service.txt"; grep -h -A4 "^phases" "$OUT"/eval_service*.txt
python - "$OUT/throughput.json" <<'PY'
import json, sys
phase = json.load(open(sys.argv[1]))["pool1"]
print("pool1", {k: phase.get(k) for k in ("per_hour", "wall_s", "right", "candidates", "warm_passed",
                                          "warm_beyond_timed_median_s", "passed_phase_medians_s")})
PY
