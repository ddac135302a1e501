#!/usr/bin/env bash
# One short device call: warm Triton evaluations through `kernelevo serve`, paced
# as a search sends them (PAUSE_S between jobs, the model's reply time), and
# back to back (no pause). Each eval's wall and phases in $OUT/paced.txt.
#   device run: bash bench/gpu_warm_paced.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python -m kernelevo.cli.app serve > "$OUT/serve.txt" 2>&1 &
SERVER=$!
for i in $(seq 100); do [ -f "$KERNELEVO_CACHE_DIR/service.json" ] && break; sleep 0.2; done
TIMEFORMAT=%R
for pause in 0 0 0 0 ${PAUSE_S:-4} ${PAUSE_S:-4} ${PAUSE_S:-4} ${PAUSE_S:-4}; do
    sleep "$pause"
    wall=$( { time timeout 60 python -m kernelevo.cli.app eval examples/softmax/task.py \
        examples/softmax/triton_candidate.py --json > /tmp/paced.json 2>/dev/null ; } 2>&1 )
    python - "$pause" "$wall" /tmp/paced.json >> "$OUT/paced.txt" <<'PY'
import json, sys
pause, wall, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
verdict = json.load(open(path))
phases = verdict.get("phases_s", {})
print(json.dumps({"pause_s": float(pause), "wall_s": wall, "reason": verdict.get("reason"),
                  "phases": phases}))
PY
done
kill $SERVER; wait $SERVER 2>/dev/null
cat "$OUT/paced.txt" | cut -c1-400
for file in ${GPU_TESTS:-}; do
    timeout 150 python -m pytest -m gpu -q -p no:cacheprovider "$file" > "$OUT/gpu_tests.txt" 2>&1
    echo "$file exit $?: $(tail -1 "$OUT/gpu_tests.txt")"
done
