"""The judge's side of one worker: its reports collected, its questions answered.

A `Session` hands each decoded worker message here once candidates were
given: progress, the warm-up's steps, each candidate's failure or checked
outputs (decided at once, `outcome.judge_candidate`), which to time, and
the timing report.
"""

from __future__ import annotations

import time
from typing import Any

from kernelevo.candidate import Candidate
from kernelevo.evaluate.shared import preload_modules
from kernelevo.evaluate.shared.messages import (Abort, Checked, CheckedCandidate, Failed, Granted,
                                                Message, Progress, Ready, ReadyReply, TimeThese,
                                                Timing)


class WorkerState:
    """Collects the worker's reports and answers its questions while it runs."""

    def __init__(self, judge: Any, candidates: list[Candidate], oracle: Any,
                 time_them: bool) -> None:
        self.judge, self.candidates, self.oracle = judge, candidates, oracle
        self.reference: dict[str, Any] = {}
        self.time_them = time_them
        self.decisions: dict[int, Any] = {}
        self.reports: dict[int, CheckedCandidate] = {}
        self.failures: dict[int, Failed] = {}
        self.timing: Timing | None = None
        self.started = time.perf_counter()
        # Judge-side phases: from the worker's start to its first question
        # (process start, task import, baselines warm-up), and how long it
        # then waited for the oracle's reference.
        self.phases: dict[str, float] = {}
        # Whether the worker finished its warm-up (the task's Model, run for the
        # baselines): a worker that died before it never loaded a candidate.
        self.warmed_up = False

    def on_message(self, message: Message) -> Message | None:
        if isinstance(message, Progress):
            self.judge.progress(message.phase)
        elif isinstance(message, Ready):
            self.warmed_up = True
            # Where the worker's own warm-up went (done ahead, for a standby session).
            for step, seconds in message.warmup.items():
                self.phases[f"warmup_{step}"] = seconds
            if message.imported:  # before any candidate ran
                preload_modules.remember(self.judge.cache_dir, list(message.imported))
            return self._ready()
        elif isinstance(message, Failed):
            self.failures[message.candidate] = message
            self.decisions[message.candidate] = (
                "failed", {"reason": message.reason, "message": message.message})
            return Granted()
        elif isinstance(message, CheckedCandidate):
            self._judge(message)
            return Granted()
        elif isinstance(message, Checked):
            passing = [i for i, d in self.decisions.items() if d[0] == "passed"]
            return TimeThese(tuple(passing) if self.time_them else ())
        elif isinstance(message, Timing):
            self.timing = message
        return None

    def _judge(self, report: CheckedCandidate) -> None:
        from kernelevo.evaluate.parent.outcome import judge_candidate

        self.reports[report.candidate] = report
        self.judge.progress("judging outputs")
        started = time.perf_counter()
        self.decisions[report.candidate] = judge_candidate(self, report.candidate, report)
        self.phases["judging"] = self.phases.get("judging", 0.0) + (
            time.perf_counter() - started)
        self.judge.progress("judged")

    def _ready(self) -> ReadyReply | Abort:
        """Release the worker once the reference exists (or tell it to stop)."""
        asked = time.perf_counter()
        self.phases["worker_start"] = asked - self.started
        self.oracle.ready.wait()
        self.phases["reference_wait"] = time.perf_counter() - asked
        if self.oracle.reference is None:
            return Abort()
        self.reference = self.oracle.reference
        self.judge.progress("loading candidate")
        return ReadyReply(seeds=tuple(self.reference["seeds"]),
                          variants=tuple(self.reference["variants"]),
                          tolerances=tuple(tuple(t) for t in self.reference["tolerances"]))


