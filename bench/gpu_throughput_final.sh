#!/usr/bin/env bash
# One device call (< 10 min): the crash fixtures through the judge's sessions,
# a first `kernelevo eval` in empty caches (the fully cold figure; it also
# writes the bytecode and learns the preload), then bench/throughput.py: pools
# of one, two and three lanes, KernelBench's harness, and the CLI (eval --local
# with caches warm and empty, eval via the service). Add the phase kb_bytecode
# for KernelBench's harness with its bytecode cached (run 2026-12-01, third call).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KERNELEVO_CACHE_DIR=${KERNELEVO_CACHE_DIR:-/tmp/ke-cache} PYTHONPATH=src
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
python -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
env | grep -E "^PYTHON(DONTWRITEBYTECODE|PYCACHEPREFIX)=" >> "$OUT/gpu.txt"
timeout 100 python -m pytest -m gpu -rA -p no:cacheprovider tests/test_fixtures.py \
    -k "illegal_address or gpu_oom or race_reduction" > "$OUT/pytest_gpu.txt" 2>&1
bash bench/kernelbench/setup_device.sh > /dev/null 2>&1
TIMEFORMAT="wall %R s"
{ time timeout 120 python -m kernelevo.cli.app eval examples/softmax/task.py \
    examples/softmax/triton_candidate.py --local ; } > "$OUT/first_eval.txt" 2>&1
timeout 450 python bench/throughput.py --kb .kb --out "$OUT" \
    --phases pool1 pool2 pool3 kb cli "$@" > "$OUT/throughput.txt" 2>&1
grep -E "passed|failed|error" "$OUT/pytest_gpu.txt" | tail -6; tail -3 "$OUT/first_eval.txt"
tail -70 "$OUT/throughput.txt"
