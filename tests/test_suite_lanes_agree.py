"""Lanes change when a verdict comes, never what it says: two lanes give one lane's rows.

Real judges on the CPU (the Triton interpreter, the fixtures' small tasks),
the same solutions judged once on one lane and once on two.
"""

import json
import os
import subprocess
import sys

from kernelevo.config import EvalConfig
from kernelevo.suite import SuitePlan, run_suite
from tests.conftest import ROOT
from tests.suite_layout import lay_out

LEVEL = [(1, "add", ["honest_add.py", "off_by_one_mask.py"]),
         (2, "rowsum", ["honest_rowsum.py"]),
         (3, "softmax", ["try_fallback.py"]),
         (4, "linear_relu", ["honest_linear_relu.py"])]
# What a row says of its solution; the rest is when, where and how long.
VERDICT_FIELDS = ("task", "sample", "file", "reason", "status", "passed_kernel", "flags",
                  "speedup", "baseline_source", "measure", "sizes")


def verdicts(rows):
    return sorted((tuple(json.dumps(row.get(k), sort_keys=True) for k in VERDICT_FIELDS)
                   for row in rows))


def test_two_lanes_give_the_rows_of_one_lane(tmp_path):
    root = lay_out(tmp_path, LEVEL)
    one = run_suite(SuitePlan(("kernelbench:level1",), root / "solutions", tmp_path / "one",
                              EvalConfig(device="cpu"), str(root / "kb"), lanes=1))
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    two = subprocess.run(
        [sys.executable, "-m", "kernelevo.cli.app", "suite", "kernelbench:level1",
         "--solutions", str(root / "solutions"), "--out", str(tmp_path / "two"),
         "--kernelbench-dir", str(root / "kb"), "--device", "cpu", "--lanes", "2",
         "--verbose"], capture_output=True, text=True, timeout=900, cwd=ROOT,
        env=environment)
    assert two.returncode == 0, two.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "two" / "results.jsonl").read_text()
            .splitlines()]
    assert {r["reason"] for r in one.rows} >= {"passed", "output_mismatch", "try_fallback"}
    assert verdicts(rows) == verdicts(one.rows)
    assert {r["lane"] for r in rows if "lane" in r} == {0, 1}  # both lanes judged
    spent = json.loads((tmp_path / "two" / "suite.json").read_text())["time_spent"]
    assert spent["lanes"] == 2 and spent["rows"] == 5 and spent["first_row_s"] > 0
    assert sum(lane["rows"] for lane in spent["per_lane"]) == 5
    assert "where the time went:" in two.stderr and "first row after" in two.stderr
    assert "lanes' own waits:" in two.stderr
    # The progress lines: "estimating..." until rows past each lane's first are in.
    progress = [line for line in two.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 5 and progress[0].endswith("(estimating...)")
