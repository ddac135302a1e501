#!/bin/bash
# usage: measure.sh LABEL PYTHONPATH_SRC  (warm page cache; 50k all figures once, 200k the
# figures issue 25 still missed, median of 3)
label=$1; src=$2
cd /work/main
for size in 50k 200k; do
  run=$(ls -d /tmp/i25b_scale$size/*)
  cat $run/run.db > /dev/null
  if [ $size = 50k ]; then only=""; repeats=1; else only="--only resume,ui_run_page,show_json,export_best"; repeats=3; fi
  uptime > /tmp/i25b_results/${label}_${size}_warm.load
  PYTHONPATH=$src .venv/bin/python bench/scale_realistic.py measure --run $run --cache warm --repeats $repeats $only \
    --json /tmp/i25b_results/${label}_${size}_warm.json > /tmp/i25b_results/${label}_${size}_warm.log 2>&1
  uptime >> /tmp/i25b_results/${label}_${size}_warm.load
done
echo done > /tmp/i25b_results/${label}.done
