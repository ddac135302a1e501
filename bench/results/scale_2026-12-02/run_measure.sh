#!/bin/bash
# usage: run_measure.sh LABEL PYTHONPATH_SRC
label=$1; src=$2
cd /work/main

for size in 50k 200k; do
  run=$(ls -d /tmp/scale$size$3/*)
  for cache in warm cold; do
    uptime > /tmp/scale_results/${label}_${size}_${cache}.load
    PYTHONPATH=$src .venv/bin/python bench/scale_realistic.py measure --run $run --cache $cache --repeats 1 \
      --json /tmp/scale_results/${label}_${size}_${cache}.json > /tmp/scale_results/${label}_${size}_${cache}.log 2>&1
    uptime >> /tmp/scale_results/${label}_${size}_${cache}.load
  done
done
echo done > /tmp/scale_results/${label}.done
