"""A row's path on its lane: the phases an evaluation's caller waited on, adding up to its wall."""

from __future__ import annotations

from kernelevo.evaluate.parent.session import path_phases
from kernelevo.suite.time_spent import LaneRecord, time_lines, time_spent


def test_each_milestone_passed_ends_a_phase_and_a_missing_one_folds_into_the_next():
    marks = {"given": 10.0, "ready": 10.5, "checked": 13.0, "gate": 14.5, "timed": 15.25,
             "done": 16.0}
    assert path_phases(marks) == {"path_warmup_left": 0.5, "path_checks": 2.5,
                                  "path_gate_wait": 1.5, "path_timing": 0.75,
                                  "path_to_exit": 0.75}
    # no GPU: no gate and no timing; the time after the checks is the path to the exit
    assert path_phases({"given": 0.0, "ready": 2.0, "checked": 5.0, "done": 5.5}) == {
        "path_warmup_left": 2.0, "path_checks": 3.0, "path_to_exit": 0.5}
    # a candidate that failed its checks sends no Checked to time: ready to the end
    assert path_phases({"given": 0.0, "ready": 0.25, "done": 1.0}) == {
        "path_warmup_left": 0.25, "path_to_exit": 0.75}
    assert path_phases({}) == {}


def test_the_suite_account_sums_the_path_and_what_the_session_did_not_cover():
    rows = [{"task": "a", "sample": 0, "wall_s": 10.0,
             "phases_s": {"path_warmup_left": 1.0, "path_checks": 3.0, "path_gate_wait": 2.0,
                          "path_timing": 1.0, "path_to_exit": 1.5, "shape_variation": 0.5,
                          "worker_start": 7.0}},
            {"task": "b", "sample": 0, "wall_s": 4.0,
             "phases_s": {"path_warmup_left": 0.0, "path_checks": 2.0, "path_to_exit": 1.0}}]
    spent = time_spent(rows, LaneRecord(), 14.0)
    assert spent["path_s"] == {"the worker's warm-up left": 1.0, "checks": 5.0,
                               "the GPU's timing gate": 2.0, "timing": 1.0,
                               "profile and process exits": 2.5,
                               "the re-check at other sizes": 0.5, "the rest": 2.0}
    assert sum(spent["path_s"].values()) == sum(row["wall_s"] for row in rows)
    line = next(line for line in time_lines(spent) if "path on its lane" in line)
    assert "checks 2.50" in line and "the rest 1.00" in line


def test_the_suite_account_shows_the_judges_decisions_apart_within_the_checks():
    rows = [{"task": "a", "sample": 0, "wall_s": 40.0,
             "phases_s": {"first_call": 1.0, "judging": 30.0, "decide": 28.0,
                          "decide_cpu": 25.0}},
            {"task": "b", "sample": 0, "wall_s": 5.0,
             "phases_s": {"first_call": 0.5, "judging": 2.0, "decide": 0.5}}]
    spent = time_spent(rows, LaneRecord(), 45.0)
    assert spent["phases_s"]["checks"] == 33.5  # the decisions stay counted in the checks
    assert spent["phases_s"]["the judge's decisions (of the checks)"] == 28.5
    assert spent["phases_s"]["decisions on the CPU"] == 25.0
    line = next(line for line in time_lines(spent) if "summed over the rows" in line)
    assert "the judge's decisions (of the checks) 28.5 s, decisions on the CPU 25.0 s" in line


def test_the_suite_account_says_how_fast_the_host_was():
    rows = [{"task": t, "sample": 0, "wall_s": 1.0, "phases_s": {},
             **({"host_probe_us": probe} if probe is not None else {})}
            for t, probe in (("a", "240"), ("b", "251"), ("c", None), ("d", "262"), ("e", "x"))]
    spent = time_spent(rows, LaneRecord(), 5.0)
    assert spent["host_probe_us"] == 251.0  # rows without a probe (no timing) left out
    assert any("probe loop read 251 us a round" in line for line in time_lines(spent))
    assert time_spent(rows[2:3], LaneRecord(), 1.0)["host_probe_us"] is None


def test_the_suite_account_says_when_each_of_its_own_steps_before_the_first_row_was_done():
    record = LaneRecord(started=100.0)
    clock = iter([100.25, 102.0, 102.0, 102.5])
    record.since_start = lambda: next(clock) - record.started  # type: ignore[method-assign]
    for step in ("tasks and solutions read", "the GPU named", "the GPU named",
                 "lanes counted"):
        record.mark(step)
    assert record.marks == {"tasks and solutions read": 0.25, "the GPU named": 2.0,
                            "lanes counted": 2.5}  # a step is marked once, when first done
    spent = time_spent([], record, 3.0)
    assert spent["steps_s"] == record.marks
    line = next(line for line in time_lines(spent) if "own steps" in line)
    assert line == ("  the suite's own steps, done at: tasks and solutions read 0.2 s, "
                    "the GPU named 2.0 s, lanes counted 2.5 s")
    assert not any("own steps" in line for line in time_lines(time_spent([], LaneRecord(), 1.0)))


def test_a_suite_marks_its_steps_before_its_first_row(tmp_path, monkeypatch):
    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.verdict import Verdict
    from kernelevo.suite import SuitePlan, run_suite
    from tests.suite_layout import lay_out

    bench = lay_out(tmp_path, [(1, "add", ["honest_add.py"])])

    class QuickJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            pass

        def evaluate(self, candidate):
            return Verdict("ok", "passed")

        def close(self):
            pass

    monkeypatch.setattr(judge_module, "Judge", QuickJudge)
    monkeypatch.setenv("KERNELEVO_CACHE_DIR", str(tmp_path / "cache"))
    result = run_suite(SuitePlan(("kernelbench:level1",), bench / "solutions", tmp_path / "out",
                                 EvalConfig(device="cpu"), str(bench / "kb")))
    steps = result.time_spent["steps_s"]
    assert list(steps) == ["tasks and solutions read", "the GPU named", "lanes counted",
                           "the first task taken, its judge made"]
    assert list(steps.values()) == sorted(steps.values())
