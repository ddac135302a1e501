#!/bin/bash
cd /work/main
for label in before after; do
  if [ $label = before ]; then run=$(ls -d /tmp/scale200k/*); else run=$(ls -d /tmp/scale200k_after/*); fi
  cat $run/run.db > /dev/null
  uptime > /tmp/scale_results/${label}_200k_warm_rerun.load
  PYTHONPATH=/tmp/${label}_src/src .venv/bin/python bench/scale_realistic.py measure --run $run --cache warm --repeats 3 --only report,ui_run_page,show,resume \
     --json /tmp/scale_results/${label}_200k_warm_rerun.json > /tmp/scale_results/${label}_200k_warm_rerun.log 2>&1
  uptime >> /tmp/scale_results/${label}_200k_warm_rerun.load
done
echo done > /tmp/scale_results/rerun.done
