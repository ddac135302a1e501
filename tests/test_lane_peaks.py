"""suite/lane_peaks.py: a task's lane sized from the GPU peaks an earlier suite recorded."""

from __future__ import annotations

import json

from kernelevo.config import EvalConfig
from kernelevo.evaluate.verdict import Verdict
from kernelevo.suite.footprint import CONTEXT_BYTES, LANE_PROCESSES, measure_footprint
from kernelevo.suite.lane_peaks import LanePeaks, peaks_key
from kernelevo.suite.schedule import PlannedTask
from kernelevo.suite.tasks import Solution, SuiteTask
from kernelevo.task import load_task
from tests.conftest import ROOT
from tests.suite_layout import lay_out

GiB = 1 << 30
CONTEXTS = 4 * CONTEXT_BYTES  # the evaluation's oracle and worker, the re-check's two


def test_the_largest_peak_of_each_process_is_kept_on_disk(tmp_path):
    store = LanePeaks.for_gpu(tmp_path, "NVIDIA H100 80GB HBM3")
    assert store.path == tmp_path / "lane_peaks" / "nvidia-h100-80gb-hbm3.json"
    assert store.lane_bytes("k", 1) is None  # nothing recorded: sized from the task's sizes
    store.record("k", {"oracle": 4 * GiB, "worker": 8 * GiB, "recheck_oracle": 2 * GiB,
                       "recheck_worker": 3 * GiB})
    store.record("k", {"oracle": 5 * GiB, "worker": 6 * GiB})  # the oracle's grew only
    store.record("k", {"worker": 0, "other": 99 * GiB})  # nothing of a lane's processes
    again = LanePeaks.for_gpu(tmp_path, "NVIDIA H100 80GB HBM3")
    one = CONTEXTS + ((5 + 8) * GiB + (2 + 3) * GiB)
    assert again.lane_bytes("k", 1) == one
    # a standby beside the evaluation holds a second session's data and its two processes'
    # contexts, not a second re-check
    assert again.lane_bytes("k", 2) == LANE_PROCESSES * CONTEXT_BYTES + (2 * 13 * GiB + 5 * GiB)
    # a task judged with no re-check recorded none: its lane counts no re-check's processes
    store.record("plain", {"oracle": GiB, "worker": GiB})
    assert store.lane_bytes("plain", 1) == 2 * CONTEXT_BYTES + 2 * GiB
    assert json.loads(again.path.read_text())["tasks"]["k"] == {
        "oracle": 5 * GiB, "worker": 8 * GiB, "recheck_oracle": 2 * GiB,
        "recheck_worker": 3 * GiB}


def test_an_unreadable_store_is_an_empty_one(tmp_path):
    path = tmp_path / "lane_peaks" / "gpu.json"
    path.parent.mkdir()
    path.write_text("{not json")
    store = LanePeaks(path, "gpu")
    assert store.lane_bytes("k", 1) is None
    store.record("k", {"oracle": GiB, "worker": GiB})
    # no re-check recorded: the evaluation's two processes' contexts
    assert LanePeaks(path, "gpu").lane_bytes("k", 1) == 2 * CONTEXT_BYTES + 2 * GiB


def test_the_key_holds_the_precision_the_input_sets_and_the_backward():
    keys = {peaks_key("src", "float32", 3, False), peaks_key("src", "float16", 3, False),
            peaks_key("src", "float32", 4, False), peaks_key("src", "float32", 3, True),
            peaks_key("other", "float32", 3, False)}
    assert len(keys) == 5


def test_a_task_with_recorded_peaks_is_sized_from_them_else_from_its_sizes(tmp_path):
    from kernelevo.suite.lanes import _prepare

    task = load_task(str(ROOT / "tests" / "fixtures" / "tasks" / "add.py"))
    config = EvalConfig()
    store = LanePeaks(tmp_path / "peaks.json", "gpu")

    def entry(solutions):
        return PlannedTask(SuiteTask("add", task.path), [Solution(task.path, n)
                                                         for n in range(solutions)], 0, False)

    first = entry(1)
    _prepare(first, lambda t: (task, {}), config, sized=True, peaks=store)
    assert first.lane_bytes_from == "sizes"
    assert first.lane_processes == 4  # the evaluation's two and the re-check's two
    assert first.lane_bytes == measure_footprint(task).lane_bytes(config.input_sets, 1,
                                                                  config.vary_shapes)
    several = entry(2)  # its standby's session beside the evaluation
    _prepare(several, lambda t: (task, {}), config, sized=True, peaks=store)
    assert several.lane_bytes == measure_footprint(task).lane_bytes(config.input_sets, 2,
                                                                    config.vary_shapes)
    store.record(first.peaks_key, {"oracle": GiB, "worker": 3 * GiB})
    one, two = entry(1), entry(2)
    for planned in (one, two):
        _prepare(planned, lambda t: (task, {}), config, sized=True, peaks=store)
    assert (one.lane_bytes_from, one.lane_bytes) == ("peaks", 2 * CONTEXT_BYTES + 4 * GiB)
    assert (one.lane_processes, two.lane_processes) == (2, 4)  # no re-check recorded
    assert two.lane_bytes == 4 * CONTEXT_BYTES + 8 * GiB  # its standby: two sessions, no re-check
    unsized = entry(1)
    _prepare(unsized, lambda t: (task, {}), config, sized=False, peaks=store)
    assert (unsized.lane_bytes, unsized.lane_bytes_from) == (0, "")  # no GPU to size for


def test_a_suite_records_its_passing_rows_peaks_and_the_next_one_sizes_lanes_from_them(
        tmp_path, monkeypatch):
    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.suite import SuitePlan, run_suite, runner, schedule

    bench = lay_out(tmp_path, [(1, "add", ["honest_add.py", "off_by_one_mask.py"])])

    class PeakJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            pass

        def warm_up(self):
            pass

        def evaluate(self, candidate):
            if "n_elements - 1" in candidate.source:  # wrong: its peaks are not a passing run's
                return Verdict("wrong", "output_mismatch",
                               gpu_peak_bytes={"oracle": 50 * GiB, "worker": 50 * GiB})
            return Verdict("ok", "passed", gpu_peak_bytes={"oracle": GiB, "worker": 2 * GiB,
                                                           "recheck_worker": GiB})

        def close(self):
            pass

    monkeypatch.setattr(judge_module, "Judge", PeakJudge)
    monkeypatch.setattr(judge_module, "resolve_device", lambda config: "cuda")
    monkeypatch.setattr(judge_module, "child_environment", lambda device, index: {})
    monkeypatch.setattr(runner, "gpu_model", lambda: "Stand-in GPU")
    monkeypatch.setattr(schedule, "gpu_memory", lambda index: (70 * GiB, 80 * GiB))
    monkeypatch.setenv("KERNELEVO_CACHE_DIR", str(tmp_path / "cache"))

    def suite(out):
        return run_suite(SuitePlan(("kernelbench:level1",), bench / "solutions", tmp_path / out,
                                   EvalConfig(), str(bench / "kb"), lanes=1)).rows

    first = suite("first")
    assert {r["lane_bytes_from"] for r in first} == {"sizes"}
    stored = json.loads((tmp_path / "cache" / "lane_peaks" / "stand-in-gpu.json").read_text())
    assert list(stored["tasks"].values()) == [{"oracle": GiB, "worker": 2 * GiB,
                                               "recheck_worker": GiB}]
    second = suite("second")
    assert {r["lane_bytes_from"] for r in second} == {"peaks"}
    # each row says whose contexts its lane's size counted: two sessions and the re-check
    assert {r["lane_processes"] for r in second} == {LANE_PROCESSES}
    # two solutions: the evaluation and its standby, each a session's data, and the re-check
    assert {r["lane_bytes"] for r in second} == {LANE_PROCESSES * CONTEXT_BYTES
                                                  + (2 * 3 + 1) * GiB}
