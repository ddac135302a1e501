#!/bin/bash
# The UI's first draw three times (a fresh `kernelevo ui` each), then cold page cache once,
# at 200k, for each LABEL:SRC given.
cd /work/main
run=$(ls -d /tmp/i25b_scale200k/*)
for pair in "$@"; do
  label=${pair%%:*}; src=${pair#*:}
  cat $run/run.db > /dev/null
  uptime > /tmp/i25b_results/${label}_200k_ui.load
  for i in 1 2 3; do
    PYTHONPATH=$src .venv/bin/python bench/scale_realistic.py measure --run $run --cache warm --repeats 1 --only ui_run_page \
      --json /tmp/i25b_results/${label}_200k_ui_$i.json > /dev/null 2>&1
  done
  uptime >> /tmp/i25b_results/${label}_200k_ui.load
  uptime > /tmp/i25b_results/${label}_200k_cold.load
  PYTHONPATH=$src .venv/bin/python bench/scale_realistic.py measure --run $run --cache cold --repeats 1 --only resume,ui_run_page,show_json,export_best \
    --json /tmp/i25b_results/${label}_200k_cold.json > /dev/null 2>&1
  uptime >> /tmp/i25b_results/${label}_200k_cold.load
done
echo done > /tmp/i25b_results/measure2.done
