"""speed_agreement.py's plain runs: each in a fresh process, imported ahead, timed alone."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, bench_module

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
    seen: list[int] = []  # runs recorded when each run's table was written
    rows = agreement.run_plain(plain, _staged(tmp_path, stems), runs, tmp_path / "plain.log",
                               after_run=lambda by_stem: seen.append(
                                   sum(len(v) for v in by_stem.values())), ahead=ahead)
    return rows, seen


def test_runs_started_ahead_time_one_at_a_time_each_in_a_fresh_process(tmp_path):
    rows, seen = _run(tmp_path, ["a", "b", "c"], ahead=2)
    every = [row for runs in rows.values() for row in runs]
    assert {stem: len(runs) for stem, runs in rows.items()} == {"a": 2, "b": 2, "c": 2}
    assert seen == [1, 2, 3, 4, 5, 6]  # the table written after every run: a cut keeps each
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


def test_a_table_rescored_from_its_log_counts_the_runs_a_cut_pass_left(tmp_path):
    """Session 37's call was cut in its third plain pass: the table it wrote held two runs
    a pair, its plain.log a third for 23 of the 32 pairs."""
    agreement = bench_module("speed_agreement")
    recorded = ROOT / "bench/results/session37_2026-12-07/agree_all32"
    table = json.loads((recorded / "agreement.json").read_text())
    lines = [line for line in (recorded / "plain.log").read_text().splitlines()
             if line.startswith("{")]
    (tmp_path / "two.log").write_text("\n".join(lines[:64]) + "\n")  # the two whole passes
    agreement.rescore(recorded / "agreement.json", tmp_path / "two.log", tmp_path / "two")
    again = json.loads((tmp_path / "two" / "agreement.json").read_text())
    assert again["rows"] == table["rows"]  # the same runs: the same table
    text = agreement.rescore(recorded / "agreement.json", recorded / "plain.log",
                             tmp_path / "all")
    every = json.loads((tmp_path / "all" / "agreement.json").read_text())
    counts = sorted(len(runs) for runs in every["plain"].values())
    assert counts == [2] * 9 + [3] * 23
    assert (every["facts"]["runs"], every["facts"]["runs_most"]) == (2, 3)
    assert "(2-3 runs per pair)" in text
    # the third runs' host probes are not in the log; the first two keep theirs
    assert all(runs[0]["host_probe_us"] and runs[-1]["host_probe_us"] is None
               for runs in every["plain"].values() if len(runs) == 3)
