"""The re-check at other sizes: a passing candidate must be right at other sizes of its task.

The task's size constants are perturbed to other odd values (task.py,
`perturb_sizes`) and the passing candidates are checked there, in a session
of their own (the judge's standby stays warm). Right there: a note names the
sizes. Silently wrong there: `shape_specialised`. Refusing them with an
error of its own: a pass, flagged (outcome.py, `shape_variation_verdict`).

On a GPU machine the re-check runs beside the evaluation (`Recheck`): its
oracle and worker check the candidates while the evaluation checks them, as
any two checks share a GPU (gate.py), so its verdicts are mostly in once the
evaluation has timed. Without a GPU it runs after the evaluation: two
sessions at once would halve each one's cores.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Protocol

from kernelevo.candidate import Candidate
from kernelevo.errors import TaskError
from kernelevo.evaluate.parent.host import JudgeHost
from kernelevo.evaluate.parent.outcome import shape_variation_verdict
from kernelevo.evaluate.parent.session import Session
from kernelevo.evaluate.verdict import Verdict
from kernelevo.task import Task, perturb_sizes


# The prefix of the re-check's own phases in a verdict's phases_s.
RECHECK_PHASE = "recheck_"


class Judge(JudgeHost, Protocol):
    """What the re-check needs of the judge (evaluate/parent/judge.py) whose candidates it re-checks."""

    def judge_in_session(self, candidates: list[Candidate], task: Task, time_them: bool,
                         session: Session | None = None) -> list[Verdict]:
        """Verdicts of `candidates` on `task`, in `session` or one started for them."""
        ...


class Recheck:
    """The re-check of some candidates at other sizes, run in a thread beside their evaluation."""

    def __init__(self, judge: Judge, task: Task, candidates: list[Candidate],
                 session: Session | None = None) -> None:
        # A standby session the judge warmed for it, else one started now.
        self.session = session if session is not None else Session(judge, task, False, None)
        self._verdicts: list[Verdict] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(judge, candidates),
                                        name="kernelevo-recheck", daemon=True)
        self._thread.start()

    def _run(self, judge: Judge, candidates: list[Candidate]) -> None:
        try:
            self._verdicts = judge.judge_in_session(candidates, self.session.task, False,
                                                    self.session)
        except BaseException as exc:  # raised in the judge's thread by verdicts()
            self._error = exc

    def verdicts(self) -> list[Verdict]:
        """Its verdicts, in the order of its candidates, once in (TaskError: the reference failed)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._verdicts is not None
        return self._verdicts

    def discard(self) -> None:
        """Kill it if it still runs (nothing passed, or the evaluation broke off)."""
        self.session.discard()


class OtherSizes:
    """One judge's re-check of its passing candidates at other sizes of its task."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self._varied: tuple[Task, str] | tuple[()] | None = None

    def varied(self) -> tuple[Task, str] | None:
        """The task at other sizes and those sizes in words; None when it has no size to vary."""
        if self._varied is None:
            task = self.judge.task
            changes = perturb_sizes(task.constants)
            self._varied = ((task.with_constants(changes),
                             ", ".join(f"{k}={v}" for k, v in changes.items()))
                            if changes else ())
        return self._varied or None

    def start_beside(self, candidates: list[Candidate],
                     standby: Session | None = None) -> Recheck | None:
        """The re-check of `candidates`, started now beside their evaluation (None: no sizes).

        `standby`: a session warmed ahead at the other sizes, used if it fits.
        """
        varied = self.varied()
        if standby is not None and (not varied or standby.task is not varied[0]):
            standby.close()
            standby = None
        return Recheck(self.judge, varied[0], candidates, standby) if varied else None

    def apply(self, candidates: list[Candidate], verdicts: list[Verdict],
              beside: tuple[Recheck, dict[int, int]] | None = None) -> list[Verdict]:
        """The verdicts once the passing candidates are re-checked at other sizes.

        `beside`: a re-check started beside the evaluation, with the position
        of each candidate's verdict in it; else the passing ones are re-checked now.
        """
        passing = [i for i, v in enumerate(verdicts) if v.ok]
        if not passing:  # a re-check beside, if any, is dropped by the caller
            return verdicts
        varied = self.varied()
        if not varied:
            note = ("shapes not varied: the task has no size constant (a module-level int "
                    ">= 16) to change")
            return _noted(verdicts, passing, note)
        described = varied[1]
        self.judge.progress("re-checking at other sizes")
        started = time.perf_counter()
        try:
            rechecked = self._rechecked(candidates, passing, varied[0], beside)
        except TaskError as exc:
            rechecked = None
            note = f"shapes not varied: the reference fails at {described}: {exc}"
        # the wait for the re-check after the evaluation, in the verdict's phases
        spent = round(time.perf_counter() - started, 3)
        verdicts = list(verdicts)
        for i in passing:
            verdicts[i] = replace(verdicts[i], phases_s={**verdicts[i].phases_s,
                                                         "shape_variation": spent})
        if rechecked is None:
            return _noted(verdicts, passing, note)
        for position, i in enumerate(passing):
            # The re-check's own phases, apart (JSON only): where its time went.
            own = {f"{RECHECK_PHASE}{k}": v for k, v in rechecked[position].phases_s.items()
                   if k != "total"}
            # what its processes held on the GPU beside the evaluation's (lanes are sized by it)
            peaks = {f"{RECHECK_PHASE}{k}": v
                     for k, v in rechecked[position].gpu_peak_bytes.items()}
            verdicts[i] = shape_variation_verdict(
                replace(verdicts[i], phases_s={**verdicts[i].phases_s, **own},
                        gpu_peak_bytes={**verdicts[i].gpu_peak_bytes, **peaks}),
                rechecked[position], described)
        return verdicts

    def _rechecked(self, candidates: list[Candidate], passing: list[int], task: Task,
                   beside: tuple[Recheck, dict[int, int]] | None) -> list[Verdict]:
        if beside is not None:
            found = beside[0].verdicts()
            rechecked = [found[beside[1][i]] for i in passing]
            if not any(v.reason == "out_of_memory" for v in rechecked):
                return rechecked
            # GPU memory that ran out beside the evaluation says nothing about
            # the kernel at other sizes: the re-check runs again, alone.
        return self.judge.judge_in_session([candidates[i] for i in passing], task, False)


def _noted(verdicts: list[Verdict], indexes: list[int], note: str) -> list[Verdict]:
    verdicts = list(verdicts)
    for i in indexes:
        verdicts[i] = replace(verdicts[i], notes=verdicts[i].notes + (note,))
    return verdicts
