"""SIGTERM ends `evolve` and `eval` like Ctrl-C: the run is `interrupted`, no child survives."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kernelevo.run.signals import EXIT_TERMINATED
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT, write
from tests.fakes.openai_server import Delay, FakeOpenAIServer
from tests.test_evolve_resume import _wait_for_verdicts

TASK = ROOT / "tests/fixtures/tasks/add.py"
SEED = ROOT / "tests/fixtures/candidates/honest_add.py"
TAG_ENV = "KERNELEVO_TEST_TAG"
# Holds the GIL for minutes inside one C call: a child's Python lifeline thread never
# runs, so only a judge that kills its jobs itself can end it.
HOG = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text().replace(
    "    def forward(self, ", "    def forward(self, *args):\n        sum(range(10**13))\n\n"
    "    def unused(self, ", 1)


def start(tag: str, *args: str) -> subprocess.Popen:
    """A kernelevo command whose processes, children included, carry `tag` in their environment."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), TAG_ENV: tag}
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.Popen([sys.executable, "-m", "kernelevo.cli.app", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def tagged(tag: str) -> dict[int, int]:
    """Live processes started with `tag`: {pid: parent pid}."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if f"{TAG_ENV}={tag}".encode() not in (proc / "environ").read_bytes():
                continue
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        if stat[0] != "Z":  # a zombie is gone, only not yet reaped
            found[int(proc.name)] = int(stat[1])
    return found


def wait_for_job(tag: str, command_pid: int, timeout_s: float) -> None:
    """Until a sandboxed job runs: a child of the forkserver, itself a child of the command."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        processes = tagged(tag)
        if any(parent in processes and parent != command_pid for parent in processes.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"no sandboxed job started within {timeout_s} s")


def wait_for_llm_call(db: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with RunStore.open(db) as store:
            if store.interrupted_llm_calls():  # started, not yet answered
                return
        time.sleep(0.2)
    raise AssertionError(f"no LLM call in flight within {timeout_s} s")


def assert_none_left(tag: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = tagged(tag)
    for pid in left:  # clean up after a failing test, then say what was left
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


@pytest.mark.slow
def test_sigterm_stops_eval_and_kills_its_job(tmp_path):
    tag = uuid.uuid4().hex
    process = start(tag, "eval", str(TASK), str(write(tmp_path, "hog.py", HOG)),
                    "--timeout", "600", "--no-static")
    try:
        wait_for_job(tag, process.pid, 120)
        time.sleep(3)  # into the candidate's forward, holding the GIL
        os.kill(process.pid, signal.SIGTERM)
        _, errors = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == EXIT_TERMINATED, errors[-3000:]
    assert "SIGTERM" in errors
    assert_none_left(tag)


@pytest.mark.slow
def test_sigterm_ends_an_evolve_run_as_interrupted_and_kills_its_children(tmp_path):
    tag, runs = uuid.uuid4().hex, tmp_path / "runs"
    slow_model = Delay(30, "no kernel today")  # LLM calls are in flight at the signal
    with FakeOpenAIServer([], default=slow_model) as server:
        process = start(tag, "evolve", str(TASK), "--seed", str(SEED), "--candidates", "30",
                        "--model", "fake", "--base-url", server.base_url,
                        "--runs-dir", str(runs))
        try:
            db = _wait_for_verdicts(runs, 1, 240)
            wait_for_llm_call(db, 60)
            wait_for_job(tag, process.pid, 120)
            os.kill(process.pid, signal.SIGTERM)
            _, errors = process.communicate(timeout=60)
        finally:
            process.kill()
    assert process.returncode == EXIT_TERMINATED, errors[-3000:]
    run_id = db.parent.name
    assert f"interrupted by SIGTERM; continue it with --resume {run_id}" in " ".join(
        errors.split())
    assert_none_left(tag)
    with RunStore.open(db) as store:
        assert store.run_info().status == "interrupted"
        assert [e.payload["signal"] for e in store.events("interrupted")] == ["SIGTERM"]
        # Calls cut off by the signal are settled with their worst case, not left open.
        assert store.llm_calls() and not store.interrupted_llm_calls()


def test_a_stop_asked_inside_a_deferred_section_comes_once_it_is_left():
    from kernelevo.run.signals import Terminated, interrupts_deferred, sigterm_as_interrupt

    steps = []
    with sigterm_as_interrupt():
        with pytest.raises(Terminated):
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # a handler would have run by now
                steps.append("written")
                steps.append("counted")
            steps.append("after")  # never: the stop comes as the section ends
        with pytest.raises(KeyboardInterrupt):
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                steps.append("both")
        # the handlers are the ones from before: SIGTERM raises at once again
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert steps == ["written", "counted", "both"]
