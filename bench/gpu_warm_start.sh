#!/usr/bin/env bash
# One device call (< 10 min): where a worker's warm-up goes and what a fuller
# forkserver preload saves (bench/warm_start.py), the crash fixtures through
# the sessions (children now ask for the GPU's gate after their context is
# made), and bench/throughput.py's pools at one, two and three lanes.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src:bench
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
python -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
# Imports: are torch's bytecode caches there and writable, and what do imports cost?
python - >> "$OUT/gpu.txt" 2>&1 <<'PY'
import importlib.util, os, torch
folder = os.path.dirname(torch.__file__)
print("torch at", folder, "writable:", os.access(folder, os.W_OK),
      "pyc present:", os.path.exists(importlib.util.cache_from_source(torch.__file__)))
PY
TIMEFORMAT=%R
imports="import torch, torch._dynamo, torch._inductor.compile_fx"
for run in 1 2; do
    echo "imports, plain, run $run: $( { time python -c "$imports" ; } 2>&1 ) s" >> "$OUT/gpu.txt"
done
python - >> "$OUT/gpu.txt" 2>&1 <<'PY'
import os, sys, torch
folder = os.path.join(os.path.dirname(torch.__file__), "__pycache__")
print("PYTHONDONTWRITEBYTECODE:", os.environ.get("PYTHONDONTWRITEBYTECODE"),
      "flag:", sys.flags.dont_write_bytecode, "prefix:", sys.pycache_prefix,
      "torch/__pycache__:", os.listdir(folder)[:3] if os.path.isdir(folder) else "absent")
PY
for run in 1 2; do
    echo "imports, bytecode written to /tmp/ke-pyc, run $run: $( { time python -c \
        "import sys; sys.dont_write_bytecode = False; sys.pycache_prefix = '/tmp/ke-pyc'; $imports" ; } 2>&1 ) s" >> "$OUT/gpu.txt"
done
python -X importtime -c "import torch, torch._dynamo, torch._inductor.compile_fx" 2>&1 \
    | sort -t"|" -k2 -n | tail -12 >> "$OUT/gpu.txt"
timeout 150 python bench/warm_start.py --json "$OUT/warm_start.json" > "$OUT/warm_start.txt" 2>&1
timeout 120 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_fixtures.py \
    -k "illegal_address or gpu_oom or race_reduction" > "$OUT/pytest_fixtures.txt" 2>&1
timeout 270 python bench/throughput.py --kb .kb --out "$OUT" --phases pool1 pool2 pool3 "$@" \
    > "$OUT/throughput.txt" 2>&1
cat "$OUT/gpu.txt"; tail -4 "$OUT/pytest_fixtures.txt"; tail -40 "$OUT/warm_start.txt"; tail -80 "$OUT/throughput.txt"
