"""No failure of a child leaves the search or the judge waiting forever.

Faults are injected at the judge's seam (a judge that fails the way a broken
sandbox or task makes it fail) and at the child's pipe; every wait here has a
short limit, so a hang fails the test instead of stalling the suite.
"""

import asyncio
import time

from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.errors import TaskError
from kernelevo.evaluate.sandbox.jobs import run_job
from kernelevo.evaluate.verdict import verdict_for
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT

SEED = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
CRASH = ("the reference raised:\nTraceback (most recent call last):\n"
         '  File "oracle.py", line 35, in run_oracle\n'
         "ModuleNotFoundError: No module named 'torch.utils.serialization'\n")


class CrashingJudge:
    """Fails every evaluation as a judge whose children cannot import does."""

    device = "cpu"

    def __init__(self) -> None:
        self.judged = 0

    def prebuild(self, candidate):
        return None

    def evaluate(self, candidate):
        self.judged += 1
        raise TaskError(CRASH)


class IncorrectJudge(CrashingJudge):
    """Finds every candidate wrong (repairable)."""

    def evaluate(self, candidate):
        self.judged += 1
        return verdict_for("output_mismatch", "outputs differ at set 0")


class RepairingProposer:
    """Answers each call, after a moment in flight, with a new variant of the seed."""

    def __init__(self) -> None:
        self.calls: list[bool] = []  # whether each call was a repair

    async def propose(self, parent, inspirations, repair=False):
        from kernelevo.search.proposals import Proposal

        self.calls.append(repair)
        await asyncio.sleep(0.3)  # in flight while the loop looks whether it is done
        return Proposal(candidate=Candidate(f"# try {len(self.calls)}\n{SEED}", "triton",
                                            origin="llm"))


def search(tmp_path, judge, proposer, **settings):
    store = RunStore.create(tmp_path, "add", "source", {})
    evolution = Evolution(store, [judge], SearchConfig(backend="triton", llm_in_flight=2,
                                                       **settings),
                          Budget(candidates=20), proposer=proposer)
    evolution.seed([Candidate(SEED, "triton", origin="seed")])
    started = time.monotonic()
    progress = asyncio.run(asyncio.wait_for(evolution.run(), 15))
    return store, progress, time.monotonic() - started


def test_a_run_whose_only_seed_crashes_stops_with_the_crash_instead_of_waiting(tmp_path):
    judge, proposer = CrashingJudge(), RepairingProposer()
    store, progress, took_s = search(tmp_path, judge, proposer)
    outcome = progress.outcome
    assert outcome.status == "error" and outcome.failed
    assert outcome.reason.startswith("no candidate passed, so the LLM has no kernel to improve")
    assert "c0001 (seed) was crashed (exited_early)" in outcome.reason
    # On one line: what raised, then why (a traceback's last line).
    assert ("the judge failed: the reference raised: ... ModuleNotFoundError: No module named "
            "'torch.utils.serialization'; check the task") in outcome.reason
    assert "\n" not in outcome.reason
    assert "--seed" in outcome.reason
    assert judge.judged == 1 and proposer.calls == []  # nothing to propose from
    (stop,) = store.events("stop")
    assert stop.payload == {"status": "error", "reason": outcome.reason}
    assert took_s < 5


def test_a_run_of_wrong_candidates_stops_once_their_repairs_are_spent(tmp_path):
    judge, proposer = IncorrectJudge(), RepairingProposer()
    store, progress, _ = search(tmp_path, judge, proposer, repair_tries=2)
    # The seed, its repair and that repair's repair: each judged, none stopped midway.
    assert proposer.calls == [True, True]
    assert [c.candidate.origin for c in store.candidates()] == ["seed", "llm", "llm"]
    assert judge.judged == 3 and all(c.verdict for c in store.candidates())
    assert progress.outcome.status == "error"
    assert "all 3 judged failed" in progress.outcome.reason


def ask_then_wait(payload, channel):
    channel.ask("question")
    time.sleep(60)


def test_a_child_that_dies_while_the_judge_holds_its_question_ends_its_job(tmp_path):
    seen = {}

    def answer_late(message):
        if message["kind"] != "question":
            return None
        seen["deadline"].kill()  # the child dies (its keeper ends it) while the judge waits
        limit = time.monotonic() + 10
        while not seen["deadline"].ended() and time.monotonic() < limit:
            time.sleep(0.05)
        seen["ended"] = seen["deadline"].ended()
        return {}  # an answer to a child that is gone

    from kernelevo.evaluate.sandbox.jobs import Deadline

    seen["deadline"] = Deadline()
    started = time.monotonic()
    result = run_job(ask_then_wait, {}, tmp_path / "job", timeout_s=30,
                     output_limit_bytes=1 << 20, on_message=answer_late,
                     deadline=seen["deadline"])
    assert seen["ended"] is True and seen["deadline"].ended()
    assert [m["kind"] for m in result.messages] == ["isolation", "question"]
    assert result.exit_code is not None and result.exit_code != 0 and not result.timed_out
    assert time.monotonic() - started < 20


def _worker_of(keeper_pid: int) -> int:
    """The worker: the keeper's child in the candidate's folder (its other child is a guard)."""
    import os
    from pathlib import Path

    children = [int(pid) for task in Path(f"/proc/{keeper_pid}/task").iterdir()
                for pid in (task / "children").read_text().split()]
    (worker,) = [pid for pid in children if os.readlink(f"/proc/{pid}/cwd").endswith("/work")]
    return worker


def test_a_standby_whose_worker_died_waiting_is_dropped_and_the_next_candidate_judged():
    import os
    import signal

    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent.judge import Judge
    from kernelevo.task import load_task

    task = load_task(str(ROOT / "tests/fixtures/tasks/add.py"))
    candidate = load_candidate(str(ROOT / "tests/fixtures/candidates/honest_add.py"))
    judge = Judge(task, EvalConfig(timeout_s=60), standby=True)
    try:
        first = judge.evaluate(candidate)
        waiting = judge._standby
        assert waiting is not None and waiting.warm.wait(60) and waiting.alive()
        os.kill(_worker_of(waiting.deadline.pid), signal.SIGKILL)  # as the OOM killer would
        limit = time.monotonic() + 5
        while waiting.alive() and time.monotonic() < limit:
            time.sleep(0.05)
        assert not waiting.alive()  # its session ended with it, no longer waiting for work
        second = judge.evaluate(candidate)
    finally:
        judge.close()
    assert first.reason == second.reason == "passed", second.message
