"""speed_agreement.py's plain runs: each in a fresh process, imported ahead, timed alone."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import bench_module

# Stands in for plain_timing.py: `--one TASK CANDIDATE` prints one JSON row, here the
# moments its timing began and ended, its process, and whether torch was already imported
# when its own code started (it is, in a process started ahead).
FAKE_PLAIN = '''
import json, os, sys, time
had_torch = "torch" in sys.modules
import torch
if sys.argv[1:2] != ["--one"]:
    sys.exit("--one only")
if "broken" in sys.argv[2]:
    sys.exit("this pair fails")
began = time.time()
time.sleep(0.3)
print(json.dumps({"task": sys.argv[2], "began": began, "ended": time.time(),
                  "pid": os.getpid(), "had_torch": had_torch}), flush=True)
'''


def _staged(tmp_path: Path, stems: list[str]) -> list[dict]:
    return [{"stem": stem, "kind": "elementwise", "task": str(tmp_path / f"{stem}.py"),
             "candidate": str(tmp_path / f"{stem}__honest.py")} for stem in stems]


def _run(tmp_path: Path, stems: list[str], ahead: int, runs: int = 2) -> tuple[dict, list]:
    agreement = bench_module("speed_agreement")
    plain = tmp_path / "plain_timing.py"
    plain.write_text(FAKE_PLAIN)
    passes: list[int] = []
    rows = agreement.run_plain(plain, _staged(tmp_path, stems), runs, tmp_path / "plain.log",
                               after_pass=lambda by_stem: passes.append(
                                   min(len(v) for v in by_stem.values())), ahead=ahead)
    return rows, passes


def test_runs_started_ahead_time_one_at_a_time_each_in_a_fresh_process(tmp_path):
    rows, passes = _run(tmp_path, ["a", "b", "c"], ahead=2)
    every = [row for runs in rows.values() for row in runs]
    assert {stem: len(runs) for stem, runs in rows.items()} == {"a": 2, "b": 2, "c": 2}
    assert passes == [1, 2]
    assert len({row["pid"] for row in every}) == 6  # no process timed twice
    assert all(row["had_torch"] and row["imported_ahead"] for row in every)
    assert all(row["host_probe_us"] > 0 for row in every)
    spans = sorted((row["began"], row["ended"]) for row in every)
    assert all(end <= next_begin for (_, end), (next_begin, _) in zip(spans, spans[1:]))
    # pass after pass: every pair's first run before any pair's second
    first_pass_end = max(runs[0]["ended"] for runs in rows.values())
    assert all(runs[1]["began"] >= first_pass_end for runs in rows.values())


def test_each_process_started_on_its_turn_imports_torch_itself(tmp_path):
    rows, _ = _run(tmp_path, ["a", "b"], ahead=0, runs=1)
    assert [len(runs) for runs in rows.values()] == [1, 1]
    assert not any(row["had_torch"] or row["imported_ahead"]
                   for runs in rows.values() for row in runs)


def test_a_run_that_fails_leaves_its_error_in_the_log_and_the_others_their_rows(tmp_path):
    rows, _ = _run(tmp_path, ["a", "broken", "c"], ahead=3, runs=1)
    assert {stem: len(runs) for stem, runs in rows.items()} == {"a": 1, "broken": 0, "c": 1}
    log = (tmp_path / "plain.log").read_text()
    assert "this pair fails" in log
    assert [json.loads(line)["task"].endswith("a.py") for line in log.splitlines()
            if line.startswith("{")] == [True, False]


def test_a_run_started_ahead_whose_driver_stops_before_its_turn_ends_untimed(tmp_path):
    agreement = bench_module("speed_agreement")
    plain = tmp_path / "plain_timing.py"
    plain.write_text(FAKE_PLAIN)
    waiting = agreement._Waiting(plain, _staged(tmp_path, ["a"])[0])
    assert waiting.ready()
    waiting.process.stdin.close()  # as when the driver dies: no go comes
    stdout = waiting.process.stdout.read()
    assert waiting.process.wait(timeout=30) == 0
    assert stdout == ""  # it timed nothing
