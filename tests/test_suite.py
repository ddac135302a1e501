"""Suites: task specs, solution layouts, fast_p and geomean, resuming after a kill, outputs."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kernelevo.errors import TaskError
from kernelevo.evaluate.verdict import TimingStats, Verdict
from kernelevo.suite import expand_specs, find_solutions, summarize
from kernelevo.suite.metrics import TaskResult, fast_p, geomean
from kernelevo.suite.tasks import parse_ranges
from tests.conftest import ROOT
from tests.suite_layout import lay_out

FIXTURES = ROOT / "tests" / "fixtures"
# Three tasks of our own laid out as a KernelBench level: (problem, task, solutions).
LEVEL = [(1, "add", ["honest_add.py", "off_by_one_mask.py"]),
         (2, "rowsum", ["honest_rowsum.py"]),
         (3, "softmax", [])]


@pytest.fixture
def bench(tmp_path):
    """A KernelBench-shaped checkout of our fixture tasks and solutions in its layout."""
    return lay_out(tmp_path, LEVEL)


def kernelevo(*args, extra_env=None, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-m", "kernelevo.cli.app", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_problem_ranges():
    assert parse_ranges("1-3,7,2") == [1, 2, 3, 7]
    for bad in ("3-1", "a", "1-2-3", ""):
        with pytest.raises(TaskError, match="bad problem range"):
            parse_ranges(bad)


def test_specs_name_levels_ranges_folders_and_files(bench):
    kb = str(bench / "kb")
    assert [t.key for t in expand_specs(["kernelbench:level1"], kb)] == [
        "level1/1", "level1/2", "level1/3"]
    picked = expand_specs(["kernelbench:level1/3,1-2", "kernelbench:level1/1"], kb)
    assert [(t.key, t.level, t.problem) for t in picked] == [
        ("level1/3", 1, 3), ("level1/1", 1, 1), ("level1/2", 1, 2)]
    folder = expand_specs([str(FIXTURES / "tasks")])
    assert "rowsum" in [t.key for t in folder] and all(t.level is None for t in folder)
    with pytest.raises(TaskError, match="no problem 4, 5, 6, 7, 8, 9 in"):
        expand_specs(["kernelbench:level1/2-9"], kb)
    with pytest.raises(TaskError, match="bad suite spec"):
        expand_specs(["kernelbench:levelX"], kb)
    with pytest.raises(TaskError, match="nowhere does not exist: give a task file, a folder"):
        expand_specs([str(bench / "nowhere")], kb)


def test_solutions_in_kernelbench_layout_and_by_task_name(bench, tmp_path):
    tasks = expand_specs(["kernelbench:level1"], str(bench / "kb"))
    found = find_solutions(bench / "solutions", tasks)
    assert {k: [s.sample for s in v] for k, v in found.items()} == {
        "level1/1": [0, 1], "level1/2": [0]}
    named = tmp_path / "named"
    named.mkdir()
    (named / "rowsum.py").write_text("x")
    (named / "rowsum__second.py").write_text("x")
    (named / "rowsum_other.py").write_text("x")  # another task's name: not rowsum's
    found = find_solutions(named, expand_specs([str(FIXTURES / "tasks" / "rowsum.py")]))
    assert [s.path.name for s in found["rowsum"]] == ["rowsum.py", "rowsum__second.py"]


def test_fast_p_counts_correct_and_faster_over_every_task():
    results = [TaskResult("a", 1, True, "passed", {"eager": 2.5, "compile": 0.9}),
               TaskResult("b", 1, True, "passed", {"eager": 0.7, "compile": 0.4}),
               TaskResult("c", 2, False, "output_mismatch"),
               TaskResult("d", 0, False, "no_solution")]
    assert fast_p(results, "eager", 0.0) == 0.5  # fast_0 is the correct fraction
    assert fast_p(results, "eager", 0.5) == 0.5
    assert fast_p(results, "eager", 1.0) == 0.25
    assert fast_p(results, "compile", 0.8) == 0.25
    assert fast_p(results, "eager", 2.5) == 0.0  # strictly faster than p
    untimed = [TaskResult("a", 1, True, "passed", {"eager": None})]
    assert fast_p(untimed, "eager", 1.0) is None and fast_p(untimed, "eager", 0.0) == 1.0
    summary = summarize(results)
    assert summary.correct == 2 and summary.correct_fraction == 0.5
    assert summary.geomean["eager"].value == pytest.approx(math.sqrt(2.5 * 0.7))


def test_geomean_interval_holds_the_value_and_narrows_with_agreement():
    spread = geomean([0.5, 1.0, 2.0, 4.0, 8.0])
    assert spread.value == pytest.approx(2.0)
    assert spread.low < spread.value < spread.high
    tight = geomean([1.9, 2.0, 2.1, 2.0, 2.0])
    assert tight.high - tight.low < (spread.high - spread.low) / 10
    assert geomean([3.0]).low is None and geomean([]).value is None


def test_a_suite_killed_midway_resumes_without_judging_twice(bench):
    out = bench / "out"
    args = ["suite", "kernelbench:level1", "--solutions", str(bench / "solutions"),
            "--out", str(out), "--kernelbench-dir", str(bench / "kb"), "--device", "cpu"]
    first = kernelevo(*args, start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (results.exists() and results.read_text()):
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    judged = [json.loads(line) for line in results.read_text().splitlines()]
    assert 1 <= len(judged) < 4  # killed before the end

    refused = kernelevo(*args)
    assert refused.wait(120) == 2 and "--resume" in refused.stderr.read()

    resumed = kernelevo(*args, "--resume", "--json")
    stdout, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    pairs = [(r["task"], r["sample"]) for r in rows]
    assert sorted(pairs, key=str) == sorted([("level1/1", 0), ("level1/1", 1),
                                             ("level1/2", 0), ("level1/3", None)], key=str)
    assert rows[:len(judged)] == judged  # what the killed run judged is kept, not redone
    suite = json.loads(stdout)
    by_task = {t["key"]: t for t in suite["tasks"]}
    assert by_task["level1/1"]["correct"] and by_task["level1/2"]["correct"]
    assert by_task["level1/3"]["reason"] == "no_solution"
    assert {r["file"]: r["reason"] for r in rows if r["task"] == "level1/1"} == {
        "level_1_problem_1_sample_0_kernel.py": "passed",
        "level_1_problem_1_sample_1_kernel.py": "output_mismatch"}
    assert suite["summary"]["correct"] == 2 and suite["summary"]["tasks"] == 3
    assert suite["summary"]["fast_p"]["eager"]["0"] == pytest.approx(2 / 3)
    assert suite["summary"]["fast_p"]["eager"]["1"] is None  # no GPU: untimed, not zero
    assert json.loads((out / "suite.json").read_text())["summary"] == suite["summary"]
    page = (out / "suite.html").read_text()
    assert "level1/3" in page and "no_solution" in page and "fast<sub>1.5</sub>" in page
    assert "| level1/1 | 2 | passed |" in (out / "suite.md").read_text()


def test_a_suite_stopped_by_sigterm_writes_its_summary_and_time_account_of_the_rows_so_far(
        bench):
    out = bench / "out"
    stopped = kernelevo("suite", "kernelbench:level1", "--solutions", str(bench / "solutions"),
                        "--out", str(out), "--kernelbench-dir", str(bench / "kb"),
                        "--device", "cpu", "--verbose", start_new_session=True)
    results = out / "results.jsonl"

    def judged() -> list[dict]:  # rows of solutions judged (a task without any has one at once)
        rows = [json.loads(line) for line in results.read_text().splitlines()] \
            if results.exists() else []
        return [row for row in rows if row["reason"] != "no_solution"]

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not judged():
        time.sleep(0.2)
    assert not (out / "suite.json").exists()  # written at the end, or when stopped
    stopped.send_signal(signal.SIGTERM)
    stdout, stderr = stopped.communicate(timeout=120)
    assert stopped.returncode == 143, stderr
    rows = judged()
    assert 1 <= len(rows) < 3  # stopped before the end
    suite = json.loads((out / "suite.json").read_text())
    assert suite["time_spent"]["rows"] == len(rows)
    assert sum(suite["time_spent"]["phases_s"].values()) > 0  # the judged rows' phases
    assert suite["summary"]["tasks"] == 3
    assert f"stopped: {len(rows)} row(s) judged in this run" in stderr
    assert "--resume" in stderr
    assert "where the time went:" in stdout + stderr
    assert (out / "suite.md").exists() and (out / "suite.html").exists()


def test_a_resumed_suite_must_be_the_same_suite(bench):
    out = bench / "out"
    args = ["suite", "kernelbench:level1/3", "--solutions", str(bench / "solutions"),
            "--out", str(out), "--kernelbench-dir", str(bench / "kb"), "--device", "cpu"]
    assert kernelevo(*args).wait(300) == 0
    other = kernelevo(*args[:1], "kernelbench:level1/2-3", *args[2:], "--resume")
    assert other.wait(300) == 2 and "different suite" in other.stderr.read()


def test_a_suite_hands_its_gpu_models_store_to_every_judge_and_rows_say_where_times_came_from(
        bench, monkeypatch):
    """The runner's store path, with a stand-in judge that uses the store as the GPU judge
    does (its first worker times the baselines and stores them; later ones read them)."""
    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.config import EvalConfig
    from kernelevo.suite import SuitePlan, run_suite
    from kernelevo.suite import runner

    stores = []

    class TimingJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            self.store, self.measure = baseline_store, config.timing.measure
            stores.append(baseline_store)

        def evaluate(self, candidate):
            baselines = {"eager": {"median_ms": 3.0, "iqr_ms": 0.0, "min_ms": 3.0,
                                   "samples": 20},
                         "compile": {"median_ms": 2.0, "iqr_ms": 0.0, "min_ms": 2.0,
                                     "samples": 20}}
            stored = self.store.get("task")
            if stored is None:
                self.store.put("task", {self.measure: baselines})
            stats = {n: TimingStats(**s) for n, s in baselines.items()}
            stats["candidate"] = TimingStats(1.0, 0.0, 1.0, 20)
            how = f"stored at {stored.measured_at}" if stored else "timed beside the candidate"
            return Verdict("ok", "passed", timing_measure=self.measure,
                           measures={self.measure: stats}, environment={"baselines": how})

        def close(self):
            pass

    monkeypatch.setattr(judge_module, "Judge", TimingJudge)
    monkeypatch.setattr(runner, "gpu_model", lambda: "Stand-in GPU")
    monkeypatch.setenv("KERNELEVO_CACHE_DIR", str(bench / "cache"))
    plan = SuitePlan(("kernelbench:level1/1",), bench / "solutions", bench / "first",
                     EvalConfig(), str(bench / "kb"))
    first = run_suite(plan)
    assert stores[0].path == bench / "cache" / "baselines" / "stand-in-gpu.json"
    assert [r["baseline_source"] for r in first.rows] == ["measured", "stored"]
    assert all(r["speedup"] == {"eager": 3.0, "compile": 2.0} for r in first.rows)
    again = run_suite(SuitePlan(plan.specs, plan.solutions, bench / "second", EvalConfig(),
                                plan.kernelbench_dir))
    assert [r["baseline_source"] for r in again.rows] == ["stored", "stored"]
    assert again.summary.geomean["eager"].value == pytest.approx(3.0)
    fresh = run_suite(SuitePlan(plan.specs, plan.solutions, bench / "third", EvalConfig(),
                                plan.kernelbench_dir, reuse_baselines=False))
    assert stores[-1].fresh  # --fresh-baselines: timed again, and stored again
    assert [r["baseline_source"] for r in fresh.rows] == ["measured", "stored"]


def test_evolve_suites_search_each_task_with_the_llm_and_count_its_tokens(tmp_path):
    """--evolve: one run per task against a fake OpenAI server; a resumed suite asks no more."""
    from tests.fakes.openai_server import FakeOpenAIServer

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name in ("add", "rowsum"):
        shutil.copy(FIXTURES / "tasks" / f"{name}.py", tasks / f"{name}.py")
    kernels = {name: (FIXTURES / "candidates" / f"honest_{name}.py").read_text()
               for name in ("add", "rowsum")}

    def answer(request):  # the kernel for the task the prompt states
        text = json.dumps(request["messages"])
        name = "rowsum" if "x.sum(dim=1)" in text else "add"
        return f"A kernel.\n\n```python\n{kernels[name]}\n```\n"

    args = ["suite", str(tasks), "--evolve", "--model", "fake-model", "--candidates", "3",
            "--out", str(tmp_path / "out"), "--device", "cpu", "--json"]
    env = {"OPENAI_API_KEY": "sk-test"}
    with FakeOpenAIServer(default=answer) as server:
        first = kernelevo(*args, "--base-url", server.base_url, extra_env=env)
        stdout, stderr = first.communicate(timeout=900)
        assert first.returncode == 0, stderr[-3000:]
        asked = len(server.requests)
        again = kernelevo(*args, "--base-url", server.base_url, "--resume",
                          extra_env=env)
        again_out, again_err = again.communicate(timeout=600)
        assert again.returncode == 0, again_err[-3000:]
        assert len(server.requests) == asked  # both tasks were done: nothing searched again
    suite = json.loads(stdout)
    rows = {r["task"]: r for r in suite["rows"]}
    assert set(rows) == {"add", "rowsum"} and asked >= 2
    for row in rows.values():
        assert row["reason"] == "passed" and row["passed_kernel"] and row["tokens"] > 0
        assert (tmp_path / "out" / "runs" / row["task"] / row["run"] / "run.db").exists()
    assert suite["summary"]["correct"] == 2
    assert suite["summary"]["tokens"] == sum(r["tokens"] for r in rows.values())
    assert json.loads(again_out)["summary"] == suite["summary"]


def test_a_suite_needs_solutions_or_evolve(bench):
    done = kernelevo("suite", "kernelbench:level1/1", "--out", str(bench / "out"),
                     "--kernelbench-dir", str(bench / "kb"), "--device", "cpu")
    assert done.wait(120) == 2 and "--solutions DIR" in done.stderr.read()


def test_tasks_are_judged_side_by_side_one_per_gpu(bench, monkeypatch):
    """--gpus 0,1: two judges at once, never two on one GPU (a stand-in judge records it)."""
    import threading

    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.config import EvalConfig
    from kernelevo.suite import SuitePlan, run_suite

    lock, busy, seen, overlap = threading.Lock(), set(), [], []

    class RecordingJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            self.gpu = gpu_index

        def close(self):
            pass

        def evaluate(self, candidate):
            with lock:
                assert self.gpu not in busy  # one judge per GPU at a time
                busy.add(self.gpu)
                seen.append(self.gpu)
                overlap.append(len(busy))
            time.sleep(0.3)
            with lock:
                busy.discard(self.gpu)
            return Verdict("ok", "passed")

    monkeypatch.setattr(judge_module, "Judge", RecordingJudge)
    result = run_suite(SuitePlan(("kernelbench:level1",), bench / "solutions", bench / "out",
                                 EvalConfig(device="cpu"), str(bench / "kb"), gpus=(0, 1)))
    assert sorted(seen) == [0, 0, 1] or sorted(seen) == [0, 1, 1]
    assert max(overlap) == 2  # the two tasks ran at the same time
    assert {r["gpu_index"] for r in result.rows if r["reason"] == "passed"} == {0, 1}
    assert len(result.rows) == 4 and result.summary.correct == 2


def test_lanes_judge_several_tasks_at_once_on_one_gpu_with_standby_judges(bench, monkeypatch):
    """On a GPU, --lanes tasks share it at once, each judge keeping its next session warm."""
    import threading

    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.config import EvalConfig
    from kernelevo.suite import SuitePlan, run_suite

    lock, busy, standby, closed = threading.Lock(), [0], [], []
    together = threading.Event()

    class LaneJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            standby_flags.append(standby)
            self.standby, self.task = standby, task

        def warm_up(self):
            events.append(("warm", self.task.name))

        def evaluate(self, candidate):
            events.append(("judge", self.task.name))
            asked.append(self.standby)
            with lock:
                busy[0] += 1
            # Held until another lane is judging too (or 10 s: then they never met).
            deadline = time.monotonic() + 10
            while not together.is_set() and time.monotonic() < deadline:
                with lock:
                    if busy[0] >= 2:
                        together.set()
                time.sleep(0.01)
            with lock:
                busy[0] -= 1
            return Verdict("ok", "passed")

        def close(self):
            closed.append(True)

    standby_flags, asked, events = standby, [], []
    monkeypatch.setattr(judge_module, "Judge", LaneJudge)
    monkeypatch.setattr(judge_module, "resolve_device", lambda config: "cuda")
    monkeypatch.setattr(judge_module, "child_environment", lambda device, index: {})
    result = run_suite(SuitePlan(("kernelbench:level1",), bench / "solutions", bench / "out",
                                 EvalConfig(device="cpu"), str(bench / "kb"), lanes=2,
                                 reuse_baselines=False))
    assert together.is_set()  # two tasks on the one GPU at the same time
    assert standby and all(standby) and len(closed) == len(standby)
    assert len(result.rows) == 4 and result.summary.correct == 2
    # A next session is kept warm only while another solution of the task follows:
    # each task's last solution is judged with standby off.
    assert asked.count(False) == 2 and asked.count(True) == len(asked) - 2
    # Two lanes, two tasks: each lane took one task at once, so neither took a
    # task ahead (a warmed task is one judged later).
    assert [e for e in events if e[0] == "warm"] == []


def test_a_lane_warms_its_next_task_before_its_current_task_s_last_solution(bench,
                                                                          monkeypatch):
    """One lane, two tasks: the second task's first session starts (Judge.warm_up)
    before the first task's last solution is judged, and is the one it uses."""
    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.config import EvalConfig
    from kernelevo.suite import SuitePlan, run_suite

    events = []
    warmed = threading.Event()

    class WarmingJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            self.task, self.standby, self.warm = task, standby, False

        def warm_up(self):
            self.warm = True
            events.append(("warm", self.task.name))
            warmed.set()

        def evaluate(self, candidate):
            if ("judge", self.task.name, False) in events:
                # The fake judges in no time: its task's second solution waits (10 s
                # at most) for the warm-up the lane starts in a thread, as a real
                # judge's seconds would. A lane that never warms ahead fails below.
                warmed.wait(10)
            events.append(("judge", self.task.name, self.warm))
            return Verdict("ok", "passed")

        def close(self):
            events.append(("close", self.task.name))

    monkeypatch.setattr(judge_module, "Judge", WarmingJudge)
    monkeypatch.setattr(judge_module, "resolve_device", lambda config: "cuda")
    monkeypatch.setattr(judge_module, "child_environment", lambda device, index: {})
    result = run_suite(SuitePlan(("kernelbench:level1",), bench / "solutions", bench / "out",
                                 EvalConfig(device="cpu"), str(bench / "kb"), lanes=1,
                                 reuse_baselines=False))
    assert result.summary.correct == 2
    first, second = events[0][1], events[-1][1]
    assert first != second
    # The second task is warmed after the first task's first solution and
    # before its last one; its own first solution finds the judge warm.
    assert events[:5] == [("judge", first, False), ("warm", second), ("judge", first, False),
                          ("close", first), ("judge", second, True)]
    assert events.count(("warm", first)) == 0  # the lane's first task had nothing to overlap
    assert events.count(("close", first)) == 1 and events.count(("close", second)) == 1


def test_gpus_that_are_not_visible_are_refused(bench):
    done = kernelevo("suite", "kernelbench:level1/1", "--solutions", str(bench / "solutions"),
                     "--out", str(bench / "out"), "--kernelbench-dir", str(bench / "kb"),
                     "--gpus", "0,1", extra_env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.wait(120) == 2 and "no visible GPU has index 0, 1" in done.stderr.read()


def test_a_suite_row_without_timings_says_no_baseline_was_measured(bench, monkeypatch):
    """A CPU run times nothing: its rows must not claim measured baselines."""
    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.verdict import Verdict
    from kernelevo.suite import SuitePlan, run_suite

    class UntimedJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            pass

        def evaluate(self, candidate):
            return Verdict("ok", "passed")  # checked, never timed

        def close(self):
            pass

    monkeypatch.setattr(judge_module, "Judge", UntimedJudge)
    monkeypatch.setenv("KERNELEVO_CACHE_DIR", str(bench / "cache"))
    plan = SuitePlan(("kernelbench:level1/1",), bench / "solutions", bench / "out",
                     EvalConfig(), str(bench / "kb"))
    rows = run_suite(plan).rows
    assert rows and all(r["baseline_source"] == "none" and r["baseline_ms"] == {} for r in rows)


def test_a_crashed_row_keeps_the_end_of_its_process_output(bench, monkeypatch):
    """Why a process crashed is told by its output: a crashed row keeps its last 2000
    characters, so a crash seen on a GPU run can be read from results.jsonl alone."""
    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.verdict import Verdict
    from kernelevo.suite import SuitePlan, run_suite

    verdicts = iter([Verdict("crashed", "exited_early", message="exited with code 0",
                             logs="x" * 3000 + "Fatal Python error: the end"),
                     Verdict("ok", "passed", logs="a warning a passing run printed")])

    class CrashingJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            pass

        def evaluate(self, candidate):
            return next(verdicts)

        def close(self):
            pass

    monkeypatch.setattr(judge_module, "Judge", CrashingJudge)
    monkeypatch.setenv("KERNELEVO_CACHE_DIR", str(bench / "cache"))
    rows = run_suite(SuitePlan(("kernelbench:level1/1",), bench / "solutions", bench / "out",
                               EvalConfig(), str(bench / "kb"))).rows
    crashed, passed = sorted(rows, key=lambda r: r["reason"])
    assert crashed["reason"] == "exited_early"
    assert len(crashed["logs"]) == 2000 and crashed["logs"].endswith("Fatal Python error: the end")
    assert passed["reason"] == "passed" and "logs" not in passed
    written = [json.loads(line)
               for line in (bench / "out" / "results.jsonl").read_text().splitlines()]
    assert any(r.get("logs", "").endswith("the end") for r in written)


def test_a_suite_search_without_memory_asks_evolve_for_none(tmp_path, monkeypatch):
    import types

    import kernelevo
    from kernelevo.config import EvalConfig
    from kernelevo.suite.evolve import SearchBudget, evolve_task

    asked = []

    def fake_evolve(task, **arguments):
        asked.append(arguments["memory"])
        progress = types.SimpleNamespace(best_id=None, outcome=None, best_vs_eager=None,
                                         best_vs_compile=None, tokens=0, cost_usd=0.0)
        return types.SimpleNamespace(progress=progress, run_id="r")

    monkeypatch.setattr(kernelevo, "evolve", fake_evolve)
    for memory in (False, True):
        evolve_task(tmp_path, "add", object(), [], EvalConfig(), SearchBudget(memory=memory))
    assert asked == [False, True]


def test_lanes_and_builds_are_sized_by_the_cores(monkeypatch):
    from kernelevo.suite import lanes

    sizes = {}
    for cores in (2, 4, 16, 64):
        monkeypatch.setattr(lanes, "_cores", lambda cores=cores: cores)
        sizes[cores] = (lanes.default_lanes(), lanes.default_lanes(gpus=2), lanes.build_workers())
    # (lanes per GPU on one GPU, on two, builds at once)
    assert sizes == {2: (2, 2, 1), 4: (2, 2, 1), 16: (6, 4, 4), 64: (6, 6, 4)}
    assert lanes.build_workers(7) == 7


def test_a_source_built_ahead_starts_no_second_build_process(monkeypatch, tmp_path):
    """The suite's builds ahead and the judge's own prebuild share one process: the
    judge finds the source built (or refused) and starts no job for it."""
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.cuda import prebuild as prebuild_module
    from kernelevo.evaluate.shared.messages import PrebuildDone
    from kernelevo.evaluate.sandbox.pipe import JobResult

    jobs = []

    def fake_job(target, payload, scratch, *args, environment=None, **kwargs):
        jobs.append(environment)
        # the compiler refused it: the child's last message says so
        return JobResult(messages=[PrebuildDone(False, 3.0, 3.5).to_json()], exit_code=0)

    monkeypatch.setattr(prebuild_module, "run_job", fake_job)
    monkeypatch.setattr(prebuild_module, "_prebuilt", set())
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    environment = {"TORCH_CUDA_ARCH_LIST": "9.0"}
    source = "# a CUDA candidate's source"
    assert prebuild_module.prebuild_source(source, EvalConfig(), environment) == 3.0
    assert prebuild_module.prebuild_source(source, EvalConfig(), environment) == 0.0
    assert len(jobs) == 1
    # Another source, another target or another build folder is built afresh.
    prebuild_module.prebuild_source(source + " ", EvalConfig(), environment)
    prebuild_module.prebuild_source(source, EvalConfig(), {"TORCH_CUDA_ARCH_LIST": "8.0"})
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "other"))
    prebuild_module.prebuild_source(source, EvalConfig(), environment)
    assert len(jobs) == 4
    assert jobs[-1]["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "other")
    assert all(job["CUDA_VISIBLE_DEVICES"] == "" for job in jobs)  # built with no GPU


def answer_then_finish_a_header(payload, channel):
    """A prebuild's child whose build is done at once and whose header takes 4 s more."""
    from kernelevo.evaluate.shared.messages import PrebuildDone, PrebuildJob, Sender

    Sender(channel).send(PrebuildDone(True, 1.5, 1.6))
    time.sleep(4)
    (Path(PrebuildJob.from_json(payload).scratch) / "header-done").write_text("")


def test_a_prebuild_answers_once_built_while_its_job_finishes_the_header(monkeypatch, tmp_path):
    """The judge goes on at the build's answer: a precompiled header the build started
    is finished by the job after it (run_prebuild), not waited for."""
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.cuda import prebuild as prebuild_module

    monkeypatch.setattr(prebuild_module, "run_prebuild", answer_then_finish_a_header)
    monkeypatch.setattr(prebuild_module, "_prebuilt", set())
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    before = set(Path(tempfile.gettempdir()).glob("kernelevo-build-*"))
    assert prebuild_module.prebuild_source("source", EvalConfig(), {}) == 1.5
    scratch = set(Path(tempfile.gettempdir()).glob("kernelevo-build-*")) - before
    assert len(scratch) == 1  # the job still runs: its folder is there
    folder = scratch.pop()
    # answered before the header was done (4 s after the answer), not when the job ended;
    # by the order of events, not by a clock a loaded machine stretches
    assert not (folder / "header-done").exists()
    deadline = time.monotonic() + 30
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists()  # gone once the job ended
    assert prebuild_module.prebuild_source("source", EvalConfig(), {}) == 0.0  # remembered


EXITS_MID_HEADER = """
import tempfile
from pathlib import Path
from kernelevo.config import EvalConfig
from kernelevo.evaluate.cuda import prebuild
from tests.test_suite import answer_then_finish_a_header

prebuild.run_prebuild = answer_then_finish_a_header
assert prebuild.prebuild_source("source", EvalConfig(), {}) == 1.5
(folder,) = Path(tempfile.gettempdir()).glob("kernelevo-build-*")
print(folder)  # the job still finishes its header in it as this process exits
"""


def test_a_judge_that_exits_while_a_build_finishes_its_header_leaves_no_scratch(tmp_path):
    """The job finishing a header after its answer is cut off when the judge's
    process exits; that exit removes the job's scratch folder."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    temp = tmp_path / "tmp"
    temp.mkdir()
    environment = {**os.environ, "TMPDIR": str(temp),
                   "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    done = subprocess.run([sys.executable, "-c", EXITS_MID_HEADER], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.parent == temp
    assert not folder.exists()


def test_builds_ahead_go_to_the_judge_s_cache_before_any_judge_exists(monkeypatch, tmp_path):
    """A suite submits its CUDA builds before it makes a judge: the builds must still
    go to the shared cache (a child's own home is empty and thrown away), and the
    judge made later must find them there by the same key."""
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.cuda import prebuild as prebuild_module
    from kernelevo.evaluate.shared.messages import PrebuildDone
    from kernelevo.evaluate.sandbox.pipe import JobResult

    jobs = []

    def fake_job(target, payload, scratch, *args, environment=None, **kwargs):
        jobs.append(environment)
        return JobResult(messages=[PrebuildDone(True, 2.0, 2.5).to_json()], exit_code=0)

    for key in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("KERNELEVO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(prebuild_module, "run_job", fake_job)
    monkeypatch.setattr(prebuild_module, "_prebuilt", set())
    environment = {"TORCH_CUDA_ARCH_LIST": "9.0"}
    assert prebuild_module.prebuild_source("ahead", EvalConfig(), environment) == 2.0
    assert jobs[0]["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "cache" / "torch_extensions")
    # A judge now sets the same caches in this process's environment (setdefault).
    for key, value in prebuild_module.cache_environment(tmp_path / "cache").items():
        monkeypatch.setenv(key, value)
    assert prebuild_module.prebuild_source("ahead", EvalConfig(), environment) == 0.0
    assert len(jobs) == 1


def test_a_row_says_when_its_stored_baselines_had_drifted(bench, monkeypatch):
    """The probe more than 10 % off the stored times: the row says `drifted`, with the ratios
    (the stored times were timed by a warm-up for nothing), not `measured` like a short task's."""
    import kernelevo.evaluate.parent.judge as judge_module
    from kernelevo.config import EvalConfig
    from kernelevo.suite import SuitePlan, run_suite
    from kernelevo.suite import runner

    environments = iter([{"baselines": "timed beside the candidate",
                          "baseline_drift": "1.31x (gpu), 1.02x (call)"},
                         {"baselines": "timed beside the candidate"}])

    class DriftingJudge:
        def __init__(self, task, config, gpu_index=None, standby=False, baseline_store=None):
            self.measure = config.timing.measure

        def evaluate(self, candidate):
            stats = {"eager": TimingStats(3.0, 0.0, 3.0, 20),
                     "compile": TimingStats(2.0, 0.0, 2.0, 20),
                     "candidate": TimingStats(1.0, 0.0, 1.0, 20)}
            return Verdict("ok", "passed", timing_measure=self.measure,
                           measures={self.measure: stats}, environment=next(environments))

        def close(self):
            pass

    monkeypatch.setattr(judge_module, "Judge", DriftingJudge)
    monkeypatch.setattr(runner, "gpu_model", lambda: "Stand-in GPU")
    monkeypatch.setenv("KERNELEVO_CACHE_DIR", str(bench / "cache"))
    result = run_suite(SuitePlan(("kernelbench:level1/1",), bench / "solutions", bench / "out",
                                 EvalConfig(), str(bench / "kb")))
    assert [r["baseline_source"] for r in result.rows] == ["drifted", "measured"]
    assert result.rows[0]["baseline_drift"] == "1.31x (gpu), 1.02x (call)"
    assert "baseline_drift" not in result.rows[1]


def test_a_verdict_whose_stored_baselines_drifted_gives_the_probes_ratios() -> None:
    from types import SimpleNamespace

    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent import outcome
    from kernelevo.evaluate.shared.messages import Timing

    judge = SimpleNamespace(device="cuda", config=EvalConfig())
    drifted = outcome._environment(judge, Timing(measures={}, baselines="drifted",
                                                 drift={"gpu": 1.31, "call": 1.02}))
    assert drifted["baselines"] == "timed beside the candidate"
    assert drifted["baseline_drift"] == "1.31x (gpu), 1.02x (call)"
    steady = outcome._environment(judge, Timing(measures={}, baselines="stored",
                                                drift={"gpu": 1.01, "call": 0.98}))
    assert "baseline_drift" not in steady  # the ratios are in its note; nothing drifted
