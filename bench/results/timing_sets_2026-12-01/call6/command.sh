# Call 6 (2026-12-01): old/src was `git archive 6147311 src` (the code at this session's start), new is the working tree.
set -u
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=/tmp/ke-cache
OUT=${OUT:-/tmp/out}
K="caught_at_runtime and cuda_graph_replay"
for i in 1 2; do
  PYTHONPATH=src timeout 100 python -m pytest -m gpu -p no:cacheprovider -q tests/test_fixtures.py -k "$K" > "$OUT/new$i.txt" 2>&1
  PYTHONPATH=old/src timeout 100 python -m pytest -m gpu -p no:cacheprovider -q tests/test_fixtures.py -k "$K" > "$OUT/old$i.txt" 2>&1
done
PYTHONPATH=src timeout 120 python -m pytest -m gpu -p no:cacheprovider -q tests/test_preload_modules.py tests/test_timing_gpu.py > "$OUT/rest.txt" 2>&1
for f in new1 old1 new2 old2 rest; do echo "== $f"; grep -E "passed|failed|got rejected|got ok|got |Error" "$OUT/$f.txt" | head -6; done
