"""The service's warm judges: kept per task, settings and GPU, a few jobs at once per GPU.

Warmth: the forkserver (torch, inductor, Triton imported) starts with the
service; each judge keeps its next oracle and worker started (standby), so a
job for a task seen before finds its reference inputs drawn, its baselines
compiled and a CUDA context made. Judges are kept per task, settings and GPU,
the least recently used closed beyond `max_judges`. Each GPU runs up to
`lanes` jobs at once; their timing phases take turns (gate.py).

No job may hold what others need for long: its time limits are finite and
at most the service's `max_timeout_s`, and a job whose client leaves is
killed (`JobControl`). The service around the pool is service.py.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelevo.errors import ConfigError
from kernelevo.evaluate.sandbox import jobs as sandbox
from kernelevo.evaluate.protocol import JudgeJob
from kernelevo.evaluate.remote.address import check_listen_host
from kernelevo.logs import get_logger
from kernelevo.version import __version__

log = get_logger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_LANE_POLL_S = 0.25  # how often a job waiting for a lane looks whether it was cancelled


class JobCancelled(Exception):
    """A job's client left (or the service stops) before the job was judged."""


@dataclass
class ServiceSettings:
    """How the service listens and how much it keeps warm."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    gpus: list[int] = field(default_factory=list)  # empty: the CPU
    lanes: int = 1  # jobs at once per GPU
    max_judges: int = 8
    token: str = ""  # empty: a new random one (loopback only)
    max_timeout_s: float = 900.0  # the most a job may set timeout_s or build_timeout_s to
    read_timeout_s: float = 10.0  # a client's time to send its whole request

    def __post_init__(self) -> None:
        check_listen_host(self.host)  # before the token it would ask for beyond loopback
        if self.lanes < 1 or self.max_judges < 1:
            raise ConfigError("--lanes and --max-judges must be at least 1")
        for name, flag in (("max_timeout_s", "--max-timeout"),
                           ("read_timeout_s", "--read-timeout")):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{flag} ({name}) must be a finite number of seconds > 0, "
                                  f"not {value!r}")
        if self.host not in LOOPBACK and len(self.token) < 16:
            raise ConfigError(f"serving on {self.host} (beyond this machine) needs a token of "
                              "16 characters or more: set KERNELEVO_SERVICE_TOKEN")
        if not self.token:
            self.token = secrets.token_urlsafe(32)


@dataclass
class JobControl:
    """One job in the pool, as its caller sees it: cancel it, and the judge it runs on."""

    cancelled: threading.Event = field(default_factory=threading.Event)
    judge: Any = None


def _ended(control: JobControl) -> bool:
    """Whether a job was cancelled, or the service stops (every job's children killed)."""
    return control.cancelled.is_set() or sandbox.stopping()


class JudgePool:
    """Warm judges by (task, settings, GPU), and a limit of jobs at once per GPU."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.slots: Sequence[int | None] = settings.gpus or [None]  # None: the CPU
        self._lanes = {slot: threading.BoundedSemaphore(settings.lanes) for slot in self.slots}
        self._busy = {slot: 0 for slot in self.slots}
        self._idle: OrderedDict[tuple[Any, ...], list[Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.jobs_done = 0

    def judge(self, job: JudgeJob,
              control: JobControl | None = None) -> tuple[list[Any], int | None]:
        """Verdicts of one job and the GPU that judged it; JobCancelled once cancelled."""
        control = control or JobControl()
        task, config, candidates = job.task(), job.config(), job.candidate_list()
        self._check_limits(config)
        slot = self._choose(job.gpu)
        try:
            self._take_lane(slot, control)
            try:
                verdicts = self._judge_in_lane(job, task, config, slot, control, candidates)
            finally:
                self._lanes[slot].release()
        finally:
            with self._lock:
                self._busy[slot] -= 1
        return verdicts, slot

    def _judge_in_lane(self, job: JudgeJob, task: Any, config: Any, slot: int | None,
                       control: JobControl, candidates: list[Any]) -> list[Any]:
        key = (job.task_source, job.task_path, job.eval, slot)
        judge = self._take(key) or self._new_judge(task, config, slot)
        control.judge = judge
        try:
            if not _ended(control):
                verdicts = judge.evaluate_many(candidates, timed=job.timed)
        except Exception:
            if not _ended(control):
                raise  # a failure of the job itself, not of its killing
        finally:
            control.judge = None
            if _ended(control):
                # Its sessions were killed: closed aside, so the lane frees now.
                threading.Thread(target=judge.close, name="kernelevo-close-judge",
                                 daemon=True).start()
            else:
                self._give_back(key, judge)
        if _ended(control):  # whatever came back, its children were killed under it
            raise JobCancelled("the job was cancelled")
        with self._lock:
            self.jobs_done += 1
        return verdicts

    def cancel(self, control: JobControl) -> None:
        """Cancel a job: it stops waiting for a lane, its processes are killed."""
        from kernelevo.evaluate.parent.session import kill_sessions

        control.cancelled.set()
        judge = control.judge
        if judge is not None:
            kill_sessions(judge)

    def _check_limits(self, config: Any) -> None:
        most = self.settings.max_timeout_s
        for name in ("timeout_s", "build_timeout_s"):
            if getattr(config, name) > most:
                raise ConfigError(f"judge job field eval.{name} is {getattr(config, name):g} s, "
                                  f"over this service's limit of {most:g} s "
                                  "(kernelevo serve --max-timeout)")

    def _take_lane(self, slot: int | None, control: JobControl) -> None:
        while not self._lanes[slot].acquire(timeout=_LANE_POLL_S):
            if _ended(control):
                raise JobCancelled("the job was cancelled while it waited for a lane")

    def _choose(self, wanted: int | None) -> int | None:
        slot: int | None
        with self._lock:
            if wanted is not None:
                if wanted not in self._busy:
                    raise ConfigError(f"GPU {wanted} is not served here (served: "
                                      f"{', '.join(str(s) for s in self.slots)})")
                slot = wanted
            else:
                slot = min(self.slots, key=lambda s: self._busy[s])
            self._busy[slot] += 1
            return slot

    def _take(self, key: tuple[Any, ...]) -> Any:
        with self._lock:
            judges = self._idle.get(key)
            if judges:
                self._idle.move_to_end(key)
                return judges.pop()
        return None

    def _give_back(self, key: tuple[Any, ...], judge: Any) -> None:
        evicted = []
        with self._lock:
            self._idle.setdefault(key, []).append(judge)
            self._idle.move_to_end(key)
            while sum(len(v) for v in self._idle.values()) > self.settings.max_judges:
                oldest_key, oldest = next(iter(self._idle.items()))
                evicted.append(oldest.pop(0))
                if not oldest:
                    del self._idle[oldest_key]
        for old in evicted:
            old.close()

    @staticmethod
    def _new_judge(task: Any, config: Any, slot: int | None) -> Any:
        from kernelevo.evaluate.parent.judge import Judge

        return Judge(task, config, gpu_index=slot, standby=True)

    def close(self) -> None:
        with self._lock:
            judges = [j for group in self._idle.values() for j in group]
            self._idle.clear()
        for judge in judges:
            judge.close()

    def close_within(self, seconds: float) -> bool:
        """Close the idle judges, waiting at most `seconds`; whether they closed in time."""
        closing = threading.Thread(target=self.close, name="kernelevo-close-judges",
                                   daemon=True)
        closing.start()
        closing.join(seconds)
        return not closing.is_alive()

    def health(self) -> dict[str, Any]:
        with self._lock:
            warm = sum(len(v) for v in self._idle.values())
            busy = dict(self._busy)
        return {"ok": True, "version": __version__,
                "device": "cuda" if self.settings.gpus else "cpu",
                "gpus": self.settings.gpus, "lanes": self.settings.lanes,
                "busy": {str(k): v for k, v in busy.items()}, "warm_judges": warm,
                "jobs_done": self.jobs_done}
