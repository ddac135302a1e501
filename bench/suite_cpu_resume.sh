#!/bin/bash
# CPU acceptance for the suite: 12 KernelBench level-1 problems, every sample, killed once, resumed.
cd "$(dirname "$0")/.."
.venv/bin/python bench/kernelbench/as_solutions.py /tmp/solall >/dev/null
OUT=${OUT:-/tmp/suite_cpu}; rm -rf $OUT; mkdir -p $OUT
ARGS="suite kernelbench:level1/19-24,26,29,30,38,39,47 --solutions /tmp/solall --out $OUT/suite --kernelbench-dir .kb --device cpu"
export PYTHONPATH=src
setsid .venv/bin/kernelevo $ARGS > $OUT/first.txt 2>&1 &
PID=$!
while [ "$(cat $OUT/suite/results.jsonl 2>/dev/null | wc -l)" -lt 6 ]; do sleep 1; done
kill -9 -$PID; wait $PID 2>/dev/null
echo "killed after $(wc -l < $OUT/suite/results.jsonl) rows" > $OUT/kill.txt
( time .venv/bin/kernelevo $ARGS --resume ) > $OUT/resumed.txt 2>&1
echo "exit $?" >> $OUT/resumed.txt
