"""bench/suite_throughput.py: a pass whose first rows all differ from the corpus is stopped early."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.conftest import bench_module

# Stands in for `kernelevo suite`: writes rows of the given reason to --out, then waits
# as a suite that goes on would, until it is stopped.
FAKE_SUITE = """
import json, pathlib, sys, time
out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
out.mkdir(parents=True, exist_ok=True)
with (out / "results.jsonl").open("w") as rows:
    for n in range(8):
        rows.write(json.dumps({"task": f"t{n}", "file": f"t{n}__s{n}.py",
                               "reason": sys.argv[-1]}) + "\\n")
        rows.flush()
time.sleep(120)
"""


def _module():
    return bench_module("suite_throughput")


def _phase(tmp_path, monkeypatch, reason: str, timeout_s: float) -> tuple[dict, float]:
    module = _module()
    real = subprocess.Popen

    def fake_popen(command, **kwargs):
        return real([sys.executable, "-c", FAKE_SUITE, *command[4:], reason], **kwargs)

    monkeypatch.setattr(module.subprocess, "Popen", fake_popen)
    monkeypatch.setattr(module, "STOP_GRACE_S", 5)
    entries = [{"file": f"s{n}.py", "kind": "honest", "problem": f"p{n}",
                "expect_reasons": ["passed"]} for n in range(8)]
    started = time.monotonic()
    result = module.suite_phase(entries, tmp_path / "tasks", tmp_path / "solutions", tmp_path,
                                timeout_s=timeout_s, cache=str(tmp_path / "cache"))
    return result, time.monotonic() - started


def test_a_pass_whose_first_rows_are_all_wrong_is_stopped_at_once(tmp_path, monkeypatch):
    result, took = _phase(tmp_path, monkeypatch, "bad_candidate", timeout_s=60)
    assert took < 30, took  # not run to its 60 s limit
    assert result["stopped_early"] and "first 6 rows" in result["stopped_early"]
    assert len(result["wrong"]) == result["judged"] >= 6


def test_a_pass_with_right_rows_runs_to_its_limit(tmp_path, monkeypatch):
    result, took = _phase(tmp_path, monkeypatch, "passed", timeout_s=8)
    assert took >= 8 and result["stopped_early"] is None
    assert result["wrong"] == [] and result["judged"] == 8
