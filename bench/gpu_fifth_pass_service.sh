#!/usr/bin/env bash
# One short device call: the graph-replay fixture in both modes (its runtime
# reasons now include non_finite), then the CLI: cold `eval --local` with
# warm and with empty caches, and `eval` through `kernelevo serve`.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 100 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_fixtures.py \
    -k cuda_graph_replay > "$OUT/pytest_graph_replay.txt" 2>&1
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
timeout 200 python bench/throughput.py --kb .kb --out "$OUT" --phases cli "$@" > /dev/null 2>&1
grep -E "PASSED|FAILED|passed|failed" "$OUT/pytest_graph_replay.txt" | tail -4
python -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['cli'], indent=0))" "$OUT/throughput.json"
