"""The judge seam: what the search, `eval` and suites ask of a judge, and jobs as data.

A judge may be in this process (`Judge`), behind a local evaluation service
(`kernelevo serve`) or on a cluster's GPU worker. Whatever is above this seam
sees only `JudgeLike` and the types here. A job that leaves this process is a
`JudgeJob`: source text, the task and settings as plain JSON values, never
pickled code, so a service or a cluster worker runs only KernelEvo's own
functions on it. `JudgeJob.from_dict` checks every field, settings included,
and names the one that is wrong: a job comes from the network.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import ConfigError
from kernelevo.evaluate.verdict import Verdict
from kernelevo.schema import settings_from_dict, settings_to_dict
from kernelevo.task import Task

JOB_VERSION = 1
_MAX_NAME_CHARS = 200


@runtime_checkable
class JudgeLike(Protocol):
    """Evaluates candidates of one task under one configuration."""

    device: str  # "cuda" or "cpu": where the candidates run

    def evaluate(self, candidate: Candidate) -> Verdict:
        """The verdict of one candidate, timed when it passes."""
        ...

    def evaluate_many(self, candidates: list[Candidate], timed: bool = True) -> list[Verdict]:
        """Verdicts of several candidates, in their order."""
        ...

    def prebuild(self, candidate: Candidate) -> float | None:
        """Build a CUDA candidate ahead (seconds spent), or None where nothing is built."""
        ...


@dataclass(frozen=True)
class JudgeJob:
    """One request to judge candidates of a task; every field is plain data."""

    task_name: str
    task_source: str
    candidates: tuple[tuple[str, str], ...]  # (source, backend) each
    eval: EvalConfig = field(default_factory=EvalConfig)  # JSON: as settings_to_dict gives it
    timed: bool = True
    gpu: int | None = None  # a GPU index on the judging host; None lets it choose
    task_path: str = ""  # where the task's file is, for modules beside it (same host only)
    version: int = JOB_VERSION

    @classmethod
    def of(cls, task: Task, candidates: list[Candidate], config: EvalConfig,
           timed: bool = True, gpu: int | None = None) -> "JudgeJob":
        # The service resolves nothing against its own folder: the path goes absolute.
        path = str(Path(task.path).resolve()) if task.path else ""
        return cls(task.name, task.source, tuple((c.source, c.backend) for c in candidates),
                   config, timed, gpu, path)

    def to_dict(self) -> dict[str, Any]:
        return {"task_name": self.task_name, "task_source": self.task_source,
                "candidates": [list(pair) for pair in self.candidates],
                "eval": settings_to_dict(self.eval), "timed": self.timed, "gpu": self.gpu,
                "task_path": self.task_path, "version": self.version}

    @classmethod
    def from_dict(cls, data: Any) -> "JudgeJob":
        """A job from decoded JSON; anything malformed is a ConfigError naming the field."""
        if not isinstance(data, dict):
            raise ConfigError("a judge job must be a JSON object")
        if data.get("version") != JOB_VERSION:
            raise ConfigError(f"judge job version {data.get('version')!r} is not "
                              f"{JOB_VERSION}: client and server differ")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"unknown judge job fields: {', '.join(sorted(unknown))}")
        for name in ("task_name", "task_source"):
            if not isinstance(data.get(name), str):
                raise ConfigError(f"judge job field {name} must be a string")
        pairs = data.get("candidates")
        if (not isinstance(pairs, list) or not pairs
                or not all(isinstance(p, list) and len(p) == 2
                           and all(isinstance(x, str) for x in p) for p in pairs)):
            raise ConfigError("judge job field candidates must be a non-empty list of "
                              "[source, backend] string pairs")
        gpu = data.get("gpu")
        if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0):
            raise ConfigError("judge job field gpu must be a GPU index or null")
        timed = data.get("timed", True)
        if not isinstance(timed, bool):
            raise ConfigError(f"judge job field timed must be true or false, not {timed!r}")
        return cls(_task_name(data["task_name"]), data["task_source"],
                   tuple((source, backend) for source, backend in pairs),
                   _settings(data.get("eval", {})), timed, gpu,
                   _task_path(data.get("task_path", "")))

    def task(self) -> Task:
        from kernelevo.task import task_from_source

        # A path that is no file here (a client on another host) names no folder.
        path = self.task_path if os.path.isfile(self.task_path) else ""
        return task_from_source(self.task_source, name=self.task_name, path=path)

    def candidate_list(self) -> list[Candidate]:
        return [Candidate(source=source, backend=backend) for source, backend in self.candidates]

    def config(self) -> EvalConfig:
        """The job's EvalConfig, checked when the job was decoded."""
        return self.eval


def _settings(settings: Any) -> EvalConfig:
    """A job's `eval` settings by the one codec; a ConfigError names the wrong one."""
    try:
        return settings_from_dict(EvalConfig, settings, "eval")
    except ConfigError as exc:
        raise ConfigError(f"judge job field {exc}") from None


def _task_name(name: str) -> str:
    """A task's name as a job gives it: a file's stem, never a path."""
    if (not name or len(name) > _MAX_NAME_CHARS or name in (".", "..")
            or any(part in name for part in ("/", "\\", "\0"))):
        raise ConfigError(f"judge job field task_name must be a task's name (1 to "
                          f"{_MAX_NAME_CHARS} characters, no path separators or '..'), "
                          f"not {name!r:.80}")
    return name


def _task_path(path: Any) -> str:
    """The task file's absolute path on the judging host, or ""; never a folder."""
    if not isinstance(path, str):
        raise ConfigError("judge job field task_path must be a string")
    if not path:
        return ""
    if "\0" in path or not os.path.isabs(path) or not path.endswith(".py"):
        raise ConfigError(f"judge job field task_path must be the absolute path of the "
                          f"task's .py file, or empty, not {path!r:.200}")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ConfigError(f"judge job field task_path {path!r:.200} is not a file")
    return path


def verdicts_to_data(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    return [v.to_dict() for v in verdicts]


def verdicts_from_data(data: Any, expected: int) -> list[Verdict]:
    """Verdicts decoded from JSON; the wrong count or shape is a ConfigError."""
    if not isinstance(data, list) or len(data) != expected:
        raise ConfigError(f"the judge answered {len(data) if isinstance(data, list) else 'no'} "
                          f"verdicts for {expected} candidates")
    try:
        return [Verdict.from_dict(item) for item in data]
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"the judge answered a malformed verdict: {exc}") from exc
