"""Lanes never cause a verdict: memory that runs out beside other lanes is judged again alone.

GPU memory and out-of-memory errors are injected: stand-in judges raise the
messages the real oracle and worker give, and the GPU's free memory is a
number the test sets.
"""

import json
import threading
import time
import types

import pytest

from kernelevo.config import EvalConfig
from kernelevo.errors import TaskError
from kernelevo.evaluate.parent.outcome import WARM_UP, _decided
from kernelevo.evaluate.sandbox.pipe import JobResult
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.suite.alone import GpuRoom, out_of_memory_in, worth_running_alone
from kernelevo.suite.footprint import Footprint
from tests.suite_layout import lay_out

GiB = 1 << 30
# What the oracle reports when the task's forward runs out (task_code.py), and a
# candidate's verdict for a CUDA allocation that failed in its forward (worker.py).
REFERENCE_OOM = ("the task's Model.forward(*get_inputs()) ran out of memory (it tried to "
                 "allocate 36.38 GiB): give the task smaller sizes (--max-input-elements)")
CUDA_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.40 GiB. GPU 0 "
            "has a total capacity of 79.19 GiB of which 2.10 GiB is free.")
CANDIDATE_OOM = f"out of memory during forward: it tried to allocate 6.40 GiB\n{CUDA_OOM}"
TWO_TASKS = [(1, "add", ["honest_add.py"]), (2, "rowsum", ["honest_rowsum.py"])]


def test_whose_memory_ran_out_and_the_size_it_asked_for():
    reference = out_of_memory_in(TaskError(REFERENCE_OOM))
    assert (reference.whose, reference.asked, reference.asked_bytes) == (
        "reference", "36.38 GiB", int(36.38 * GiB))
    candidate = out_of_memory_in(verdict_for("out_of_memory", CANDIDATE_OOM))
    assert (candidate.whose, candidate.asked) == ("candidate", "6.40 GiB")
    judge = out_of_memory_in(verdict_for("out_of_memory", "the judge's process ran out of GPU "
                                         f"memory holding the reference and the candidate's "
                                         f"outputs: {CUDA_OOM}"))
    assert (judge.whose, judge.asked) == ("judge", "6.40 GiB")
    assert out_of_memory_in(TaskError("the task's get_inputs() raised ValueError")) is None
    assert out_of_memory_in(verdict_for("output_mismatch", "out of memory")) is None


def test_a_worker_that_ran_out_in_its_warm_up_names_the_reference():
    """The worker runs the task's Model for the baselines before any candidate loads:
    memory that ran out there is not the candidate's."""
    state = types.SimpleNamespace(decisions={}, warmed_up=False)
    died = JobResult(exit_code=1, log_tail=f"Traceback (most recent call last):\n{CUDA_OOM}\n")
    verdict = _decided(state, died, None, 0, None)
    assert verdict.reason == "out_of_memory" and WARM_UP in verdict.message
    assert (out_of_memory_in(verdict).whose, out_of_memory_in(verdict).asked) == (
        "reference", "6.40 GiB")
    state.warmed_up = True
    assert out_of_memory_in(_decided(state, died, None, 0, None)).whose == "candidate"


def test_judging_again_alone_is_for_memory_that_ran_out_in_company_and_could_fit():
    asked = out_of_memory_in(TaskError(REFERENCE_OOM))
    assert worth_running_alone(asked, True, 80 * GiB)
    assert not worth_running_alone(asked, False, 80 * GiB)  # alone already: the verdict stands
    assert not worth_running_alone(asked, True, 24 * GiB)  # more than the whole GPU
    assert worth_running_alone(out_of_memory_in(TaskError("ran out of memory")), True, None)


def test_a_run_alone_waits_for_the_others_and_keeps_them_out():
    room, order = GpuRoom(), []
    closed = []
    judge = types.SimpleNamespace(close=lambda: closed.append("other judge"))
    room.add_judge(judge)
    other_inside, other_done = threading.Event(), threading.Event()

    def other_lane():
        with room.inside(1):
            other_inside.set()
            time.sleep(0.3)
            order.append("other's solution done")
        time.sleep(0.05)
        with room.inside(1):  # waits for the run alone
            order.append("other's next solution")
        other_done.set()

    threading.Thread(target=other_lane).start()
    other_inside.wait(5)
    with room.inside(0) as entry:
        with room.alone(entry) as waited_s:
            order.append("alone")
            time.sleep(0.2)
    other_done.wait(5)
    assert order == ["other's solution done", "alone", "other's next solution"]
    assert waited_s >= 0.2 and closed == ["other judge"]  # its warm sessions went first


class SharedGpu:
    """What the stand-in judges of one suite share: who is judging, and what they saw."""

    def __init__(self):
        self.lock = threading.Lock()
        self.judging: set[str] = set()
        self.events: list[tuple] = []
        self.together = threading.Event()

    def wait_together(self, deadline_s=10):
        """Hold a first evaluation until another lane judges too (their lanes overlap)."""
        end = time.monotonic() + deadline_s
        while not self.together.is_set() and time.monotonic() < end:
            with self.lock:
                if len(self.judging) >= 2:
                    self.together.set()
            time.sleep(0.01)


def stand_in_judges(monkeypatch, gpu, behave):
    """Judges that run `behave(judge, gpu)` for each evaluation, on a GPU as far as the
    suite can tell."""
    import kernelevo.evaluate.parent.judge as judge_module

    class StandInJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            self.name, self.standby, self.calls = task.name, standby, 0

        def warm_up(self):
            gpu.events.append(("warm", self.name))

        def close(self):
            gpu.events.append(("close", self.name))

        def evaluate(self, candidate):
            self.calls += 1
            with gpu.lock:
                gpu.judging.add(self.name)
            try:
                return behave(self, gpu)
            finally:
                with gpu.lock:
                    gpu.judging.discard(self.name)
                gpu.events.append(("judged", self.name))

    monkeypatch.setattr(judge_module, "Judge", StandInJudge)
    monkeypatch.setattr(judge_module, "resolve_device", lambda config: "cuda")
    monkeypatch.setattr(judge_module, "child_environment", lambda device, index: {})


def run(root, lanes, **plan):
    from kernelevo.suite import SuitePlan, run_suite

    plan.setdefault("head_start_s", 0.0)  # every lane at once: they meet in memory
    return run_suite(SuitePlan(("kernelbench:level1",), root / "solutions", root / "out",
                               EvalConfig(device="cpu"), str(root / "kb"), lanes=lanes,
                               reuse_baselines=False, **plan))


def test_a_reference_out_of_memory_beside_another_lane_is_judged_again_alone(
        tmp_path, monkeypatch):
    gpu = SharedGpu()

    def behave(judge, gpu):
        if judge.calls == 1:
            gpu.wait_together()
        if judge.name == "1_Add" and judge.calls == 1:
            raise TaskError(REFERENCE_OOM)  # the other lane held memory meanwhile
        if judge.name == "1_Add":
            with gpu.lock:
                gpu.events.append(("again", set(gpu.judging)))
            time.sleep(0.3)
        else:
            time.sleep(0.3)
        return Verdict("ok", "passed")

    stand_in_judges(monkeypatch, gpu, behave)
    root = lay_out(tmp_path, [(1, "add", ["honest_add.py"]),
                              (2, "rowsum", ["honest_rowsum.py", "honest_rowsum.py"])])
    result = run(root, lanes=2)
    rows = {(r["task"], r["sample"]): r for r in result.rows}
    assert gpu.together.is_set()
    assert [r["reason"] for r in rows.values()] == ["passed"] * 3
    add = rows[("level1/1", 0)]
    assert add["judged_alone"] and add["alone_wait_s"] > 0 and "out_of_memory" not in add
    again = next(e for e in gpu.events if e[0] == "again")
    assert again[1] == {"1_Add"}  # no other lane judged meanwhile
    # The other lane's judge (its warm sessions) was closed before the run alone, and
    # its next solution waited for that run to end.
    assert gpu.events.index(("close", "2_Rowsum")) < gpu.events.index(again)
    assert rows[("level1/2", 1)]["alone_wait_s"] >= 0.1
    assert result.time_spent["lane_waits_s"]["waits for a run alone"] >= 0.1


def test_memory_that_runs_out_alone_too_is_out_of_memory_naming_whose_and_the_size(
        tmp_path, monkeypatch):
    gpu = SharedGpu()

    def behave(judge, gpu):
        if judge.calls == 1:
            gpu.wait_together()
        if judge.name == "1_Add":
            raise TaskError(REFERENCE_OOM)
        return verdict_for("out_of_memory", CANDIDATE_OOM)

    stand_in_judges(monkeypatch, gpu, behave)
    result = run(lay_out(tmp_path, TWO_TASKS), lanes=2)
    rows = {r["task"]: r for r in result.rows}
    assert {r["reason"] for r in result.rows} == {"out_of_memory"}  # never bad_candidate
    reference, candidate = rows["level1/1"], rows["level1/2"]
    assert reference["out_of_memory"] == {"whose": "reference", "asked": "36.38 GiB",
                                          "judged_alone": True}
    assert reference["message"].startswith(
        "the reference ran out of memory (it tried to allocate 36.38 GiB) when judged alone "
        "on the GPU: give the task smaller sizes (--max-input-elements)")
    assert candidate["out_of_memory"] == {"whose": "candidate", "asked": "6.40 GiB",
                                          "judged_alone": True}
    assert candidate["status"] == "runtime_error" and not candidate["passed_kernel"]
    stored = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert {r["task"]: r["out_of_memory"]["whose"] for r in stored["rows"]} == {
        "level1/1": "reference", "level1/2": "candidate"}


def test_memory_that_ran_out_with_nothing_beside_it_is_not_judged_again(tmp_path, monkeypatch):
    gpu = SharedGpu()
    stand_in_judges(monkeypatch, gpu, lambda judge, gpu: (_ for _ in ()).throw(
        TaskError(REFERENCE_OOM)))
    result = run(lay_out(tmp_path, [(1, "add", ["honest_add.py"])]), lanes=1)
    (row,) = result.rows
    assert row["reason"] == "out_of_memory" and row["out_of_memory"]["judged_alone"] is False
    assert [e for e in gpu.events if e[0] == "judged"] == [("judged", "1_Add")]  # once


def test_a_judge_s_error_is_blamed_on_the_task_or_the_judge_never_the_candidate(
        tmp_path, monkeypatch):
    from kernelevo.errors import EnvironmentProblem

    def behave(judge, gpu):
        if judge.name == "1_Add":
            raise TaskError("the task's get_inputs() raised ValueError: no; fix the task")
        raise EnvironmentProblem("nvcc was not found: install the CUDA toolkit")

    stand_in_judges(monkeypatch, SharedGpu(), behave)
    result = run(lay_out(tmp_path, TWO_TASKS), lanes=1)
    assert {r["task"]: r["reason"] for r in result.rows} == {"level1/1": "task_error",
                                                           "level1/2": "judge_error"}
    assert all("out_of_memory" not in r for r in result.rows)


def test_a_lane_takes_no_task_that_the_gpu_s_free_memory_cannot_hold_beside_another(
        tmp_path, monkeypatch):
    """Two tasks of about 45 GiB each on an 80 GiB GPU: two lanes, one task at a time."""
    import kernelevo.suite.lanes as lanes_module
    import kernelevo.suite.schedule as schedule_module

    gpu = SharedGpu()
    overlap = []

    def behave(judge, gpu):
        with gpu.lock:
            overlap.append(len(gpu.judging))
        time.sleep(0.4)
        return Verdict("ok", "passed")

    stand_in_judges(monkeypatch, gpu, behave)
    monkeypatch.setattr(schedule_module, "gpu_memory", lambda index: (79 * GiB, 80 * GiB))
    # a lane: 3 GiB of contexts and what its processes hold for a 1.5 GiB input set
    # (footprint.py's fit), about 45 GiB in all
    monkeypatch.setattr(lanes_module, "measure_footprint",
                        lambda task, dtype: Footprint(int(1.5 * GiB), 0, 0))
    result = run(lay_out(tmp_path, TWO_TASKS), lanes=2)
    assert [r["reason"] for r in result.rows] == ["passed", "passed"]
    assert overlap == [1, 1]  # never both at once
    waits = result.time_spent["lane_waits_s"]
    assert waits["waits for GPU memory"] >= 0.2
    assert json.loads((tmp_path / "out" / "suite.json").read_text())["time_spent"] == \
        result.time_spent


def test_a_gpu_with_little_free_memory_gets_fewer_lanes(tmp_path, monkeypatch):
    import kernelevo.suite.schedule as schedule_module

    stand_in_judges(monkeypatch, SharedGpu(), lambda judge, gpu: Verdict("ok", "passed"))
    monkeypatch.setattr(schedule_module, "gpu_memory", lambda index: (4 * GiB, 80 * GiB))
    result = run(lay_out(tmp_path, TWO_TASKS), lanes=None)
    assert result.time_spent["lanes"] == 1  # 4 GiB holds one lane's processes


def test_no_task_is_warmed_ahead_before_the_suite_s_first_row(tmp_path, monkeypatch):
    """Sessions started for later tasks would only slow the first verdicts down."""
    gpu = SharedGpu()

    def behave(judge, gpu):
        time.sleep(0.5)
        return Verdict("ok", "passed")

    stand_in_judges(monkeypatch, gpu, behave)
    result = run(lay_out(tmp_path, TWO_TASKS), lanes=1)
    assert [r["reason"] for r in result.rows] == ["passed", "passed"]
    first_judged = gpu.events.index(next(e for e in gpu.events if e[0] == "judged"))
    warmed = [i for i, e in enumerate(gpu.events) if e[0] == "warm"]
    assert all(i > first_judged for i in warmed)


@pytest.fixture(autouse=True)
def _no_leftover_lanes():
    yield
    deadline = time.monotonic() + 5  # a lane's thread ends with its suite
    while time.monotonic() < deadline and any(
            t.name.startswith("suite-lane") for t in threading.enumerate()):
        time.sleep(0.05)
