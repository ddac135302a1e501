"""The error hierarchy, in one place: each message names the failing value and the fix.

Errors are raised for bad input from the user (a task that cannot be loaded,
a flag that makes no sense) and for what the machine or a service refuses. A
candidate that fails is never an error: it is a Verdict. Every class pickles,
so errors can cross process boundaries.

    KernelEvoError
    ├── TaskError, CandidateError, EnvironmentProblem
    ├── ConfigError
    │   ├── SettingError
    │   └── ResumeConflict
    ├── BudgetExhausted
    ├── MessageError
    ├── LLMError
    │   ├── LLMEmptyAnswer
    │   ├── LLMRequestError
    │   └── LLMUnavailable
    ├── StoreError
    │   └── DamagedStore
    ├── RunBusyError
    └── MemoryStoreError
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class KernelEvoError(Exception):
    """Base class of every error KernelEvo raises on purpose."""


# -- what the user gives ------------------------------------------------------


class TaskError(KernelEvoError):
    """The task file or reference cannot be used as given."""


class CandidateError(KernelEvoError):
    """The candidate file cannot be read (missing, unreadable, wrong backend flag)."""


class ConfigError(KernelEvoError):
    """A setting or flag has a value that cannot work."""


class SettingError(ConfigError):
    """One setting's value is not what its declaration allows: `name` it, `reason` the fix."""

    def __init__(self, name: str, reason: str, section: str = "") -> None:
        super().__init__(name, reason, section)  # args rebuild it when unpickled
        self.name, self.reason, self.section = name, reason, section

    def __str__(self) -> str:
        return f"{self.section} {self.name}: {self.reason}" if self.section \
            else f"{self.name}: {self.reason}"


class ResumeConflict(ConfigError):
    """A setting given with --resume differs from the run's and may not change midway."""


class EnvironmentProblem(KernelEvoError):
    """Something the machine lacks (a GPU, nvcc, an optional package)."""


class BudgetExhausted(KernelEvoError):
    """No further call fits in the budget; the message says which limit and how to raise it."""


# -- the judge and its children -------------------------------------------------


class MessageError(KernelEvoError):
    """A message between the judge and a child is of no kind its receiver knows, or malformed."""


# -- the model's endpoint --------------------------------------------------------


class LLMError(KernelEvoError):
    """A call that failed; `fatal` says whether retrying later in the run could help.

    The base class is a transient failure (retries ran out on 5xx or timeouts):
    a later call may succeed. `attempts` holds every request the call made
    (`llm.protocol.Attempt`).
    """

    fatal = False

    def __init__(self, message: str, status_code: int | None = None,
                 attempts: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.attempts = attempts

    def __reduce__(self):  # keep status_code and attempts across process boundaries
        return (type(self), (str(self), self.status_code, self.attempts))


class LLMEmptyAnswer(LLMError):
    """The server answered with no content: a failed call, never a success.

    `usage` is (input tokens, output tokens, USD) as the server reported them,
    None when it reported none: what the call is charged (charges.py).
    """

    def __init__(self, message: str, status_code: int | None = None,
                 attempts: tuple[Any, ...] = (),
                 usage: tuple[int, int, float] | None = None) -> None:
        super().__init__(message, status_code, attempts)
        self.usage = usage

    def __reduce__(self):
        return (type(self), (str(self), self.status_code, self.attempts, self.usage))


class LLMRequestError(LLMError):
    """The endpoint refused the request (bad key, unknown model, bad parameter): fix the config."""

    fatal = True


class LLMUnavailable(LLMError):
    """The endpoint failed too many times in a row (down, unreachable, hanging)."""

    fatal = True


# -- what is kept on disk ---------------------------------------------------------


class StoreError(KernelEvoError):
    """A run database is missing, unreadable or from a newer KernelEvo."""


class DamagedStore(StoreError):
    """A run database that is empty, not SQLite, or lacks part of its schema."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        super().__init__(
            f"{path} is damaged: {what}. It was left as it is: restore it from a copy, or "
            "move its run folder aside (KernelEvo never rebuilds a damaged run.db, which "
            "would hide what was lost)")

    def __reduce__(self):
        return (type(self), (self.path, self.what))


class RunBusyError(KernelEvoError):
    """Another process is driving this run."""


class MemoryStoreError(KernelEvoError):
    """The memory store cannot be opened, read or written."""
