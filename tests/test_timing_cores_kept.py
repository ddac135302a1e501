"""The cores kept for timing: named by the judge, left by every child, pinned by a timing."""

import os

import pytest
import torch

from kernelevo.evaluate.parent.judge import child_environment
from kernelevo.evaluate.sandbox.jobs import run_job
from kernelevo.evaluate.shared import cores
from kernelevo.evaluate.shared.cores import (TIMING_CORES_ENV, keep_off_timing_cores,
                                             on_timing_core, timing_core, timing_cores)

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"),
                                    reason="no CPU affinity here")


def _machine(monkeypatch, count: int, smt: bool = False) -> list[set[int]]:
    """A machine of `count` allowed cores, hyperthread pairs (n, n + count/2) with `smt`;
    returns the affinities set, in order."""
    allowed = [set(range(count))]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(allowed[-1]))
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, mask: allowed.append(set(mask)))
    half = count // 2
    monkeypatch.setattr(cores, "_left", set())
    monkeypatch.setattr(cores, "siblings",
                        lambda core: {core % half, core % half + half} if smt else {core})
    return allowed


@needs_affinity
def test_one_core_per_gpu_is_kept_counted_back_from_the_last(monkeypatch):
    _machine(monkeypatch, 16)
    assert timing_cores(1) == [15]
    assert timing_cores(2) == [15, 14]
    assert timing_cores(20) == list(range(15, 7, -1))  # at most half the cores
    assert timing_cores(0) == []


@needs_affinity
def test_a_timing_cores_hyperthread_sibling_is_kept_free_too(monkeypatch):
    allowed = _machine(monkeypatch, 16, smt=True)
    assert timing_cores(2) == [15, 14]
    assert timing_cores(8) == [15, 14, 13, 12]  # with their siblings, half the machine
    assert keep_off_timing_cores({TIMING_CORES_ENV: "15"}) == set(range(16)) - {7, 15}
    assert allowed[-1] == set(range(16)) - {7, 15}


def test_siblings_are_read_from_sysfs(tmp_path):
    for core, said in ((3, "3,11\n"), (5, "4-5\n")):
        folder = tmp_path / f"cpu{core}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(said)
    assert cores.siblings(3, str(tmp_path)) == {3, 11}
    assert cores.siblings(5, str(tmp_path)) == {4, 5}
    assert cores.siblings(9, str(tmp_path)) == {9}  # no such file: the core alone


@needs_affinity
def test_a_machine_of_few_cores_keeps_none(monkeypatch):
    _machine(monkeypatch, cores.MIN_CORES_TO_KEEP - 1)
    assert timing_cores(1) == []


@needs_affinity
def test_a_worker_times_on_the_core_kept_for_its_gpu(monkeypatch):
    _machine(monkeypatch, 16)
    named = {TIMING_CORES_ENV: "15,14"}
    assert timing_core(0, named) == 15 and timing_core(1, named) == 14
    assert timing_core(2, named) == 15  # GPUs beyond the kept cores share, by ordinal
    assert timing_core(1, {}) == 14  # none named: counted back as before


@needs_affinity
def test_a_child_moves_off_the_kept_cores_and_a_timing_pins_itself_back(monkeypatch):
    allowed = _machine(monkeypatch, 8)
    named = {TIMING_CORES_ENV: "7"}
    assert keep_off_timing_cores(named) == set(range(7))
    with on_timing_core(timing_core(0, named)) as core:
        assert core == 7 and allowed[-1] == {7}
    assert allowed[-1] == set(range(7))  # back where the child ran


@needs_affinity
def test_nothing_moves_when_no_core_is_named_or_none_would_be_left(monkeypatch):
    allowed = _machine(monkeypatch, 1)
    assert keep_off_timing_cores({}) is None
    assert keep_off_timing_cores({TIMING_CORES_ENV: "0"}) is None  # it would have no core
    assert keep_off_timing_cores({TIMING_CORES_ENV: "5"}) is None  # not one of its cores
    assert allowed == [{0}]


@needs_affinity
def test_the_judge_names_the_kept_cores_to_its_children_on_a_gpu(monkeypatch):
    _machine(monkeypatch, 16)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    environment = child_environment("cuda", 1)
    assert environment[TIMING_CORES_ENV] == "15,14"
    assert environment["CUDA_VISIBLE_DEVICES"] == "1"
    assert TIMING_CORES_ENV not in child_environment("cpu", None)


def report_cores(payload, channel):
    channel.send("cores", allowed=sorted(os.sched_getaffinity(0)),
                 named=os.environ.get(TIMING_CORES_ENV))


@needs_affinity
def test_a_jobs_process_starts_off_the_kept_core(tmp_path):
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip("one allowed core: none can be kept")
    kept = mine[-1]
    result = run_job(report_cores, {}, tmp_path / "job", timeout_s=60,
                     output_limit_bytes=1 << 20,
                     environment={TIMING_CORES_ENV: str(kept)})
    said = next(m for m in result.messages if m.get("kind") == "cores")
    assert said["named"] == str(kept)
    rest = sorted(set(mine) - cores.siblings(kept))
    if not rest:
        pytest.skip("the kept core's hyperthread siblings are every allowed core")
    assert kept not in said["allowed"] and said["allowed"] == rest


@needs_affinity
def test_a_verdict_says_which_core_timed_it_and_whether_it_was_kept(monkeypatch):
    from types import SimpleNamespace

    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent import outcome
    from kernelevo.evaluate.shared.messages import Timing

    _machine(monkeypatch, 16, smt=True)
    kept = cores.core_words(15, {TIMING_CORES_ENV: "15"})
    assert kept == "15, kept free with its hyperthread sibling 7"
    assert cores.core_words(15, {}) == "15, shared with the judge's other processes"
    assert cores.core_words(None, {}) == "unpinned"
    monkeypatch.setattr(cores, "siblings", lambda core: {core})
    assert cores.core_words(15, {TIMING_CORES_ENV: "15"}) == "15, kept free"
    judge = SimpleNamespace(device="cuda", config=EvalConfig())
    said = outcome._environment(judge, Timing(measures={}, timing_core=kept))
    assert said["timing_core"] == kept
    assert "timing_core" not in outcome._environment(judge, Timing(measures={}))


@needs_affinity
def test_the_timing_pins_the_calling_thread_alone_and_puts_it_back():
    # autograd's device thread (a backward's host work) stays where a user's process has it
    import threading

    mine = os.sched_getaffinity(0)
    if len(mine) < 2:
        pytest.skip("one allowed core")
    started, done = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (started.set(), done.wait(30)))
    worker.start()
    started.wait(30)
    try:
        core = max(mine)
        with on_timing_core(core) as used:
            assert used == core
            assert os.sched_getaffinity(0) == {core}
            assert os.sched_getaffinity(worker.native_id) == mine
        assert os.sched_getaffinity(0) == mine
    finally:
        done.set()
        worker.join(30)


@needs_affinity
def test_a_commands_judge_moves_its_own_threads_off_the_kept_cores_a_librarys_does_not(
        monkeypatch):
    allowed = _machine(monkeypatch, 16)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    lane = [set(range(16))]  # another thread of the judge's process, made before
    monkeypatch.setattr(cores, "_threads", lambda tasks="/proc/self/task": [(4242, "lane")])
    monkeypatch.setattr(os, "sched_getaffinity",
                        lambda pid: set(lane[-1] if pid == 4242 else allowed[-1]))
    monkeypatch.setattr(os, "sched_setaffinity",
                        lambda pid, mask: (lane if pid == 4242 else allowed).append(set(mask)))
    monkeypatch.setattr(cores, "_claimed", False)
    child_environment("cuda", 0)
    assert allowed == [set(range(16))] and lane == [set(range(16))]  # a library's: unmoved
    cores.claim_process()
    assert child_environment("cuda", 0)[TIMING_CORES_ENV] == "15"
    assert allowed[-1] == set(range(15)) and lane[-1] == set(range(15))
    # every later judge of the process (a suite's next task) names the same core, and the
    # process keeps the rest (each named one core lower before, until none was kept)
    for _ in range(12):
        assert child_environment("cuda", 0)[TIMING_CORES_ENV] == "15"
    assert allowed[-1] == set(range(15))


SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(cores.__file__))))
RUN_THREADS = """
import os, threading, sys
from kernelevo.evaluate.shared.cores import TIMING_CORES_ENV, keep_off_timing_cores
stop = threading.Event()
lane = threading.Thread(target=stop.wait)
lane.start()
kept = sys.argv[1]
print(sorted(keep_off_timing_cores({TIMING_CORES_ENV: kept}, every_thread=True)))
print(sorted(os.sched_getaffinity(lane.native_id)))
stop.set()
"""


@needs_affinity
def test_every_thread_of_a_process_leaves_the_kept_cores_when_asked():
    import subprocess
    import sys

    mine = sorted(os.sched_getaffinity(0))
    rest = sorted(set(mine) - cores.siblings(mine[-1]))
    if not rest:
        pytest.skip("one allowed core, or its siblings are all: none can be kept")
    done = subprocess.run([sys.executable, "-c", RUN_THREADS, str(mine[-1])],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": SRC})
    assert done.returncode == 0, done.stderr
    caller, lane = done.stdout.split("\n")[:2]
    assert caller == str(rest) and lane == str(rest)  # a thread made before moved too


def test_the_command_line_claims_its_process(monkeypatch):
    from typer.testing import CliRunner

    from kernelevo.cli.app import app

    monkeypatch.setattr(cores, "_claimed", False)
    result = CliRunner().invoke(app, ["config"])
    assert result.exit_code == 0, result.output
    assert cores.process_claimed()
