"""The error hierarchy: each message names the failing value and the fix.

Errors are raised for bad input from the user (a task that cannot be loaded,
a flag that makes no sense). A candidate that fails is never an error: it is a
Verdict. Every class pickles, so errors can cross process boundaries.
"""


class KernelEvoError(Exception):
    """Base class of every error KernelEvo raises on purpose."""


class TaskError(KernelEvoError):
    """The task file or reference cannot be used as given."""


class CandidateError(KernelEvoError):
    """The candidate file cannot be read (missing, unreadable, wrong backend flag)."""


class ConfigError(KernelEvoError):
    """A setting or flag has a value that cannot work."""


class EnvironmentProblem(KernelEvoError):
    """Something the machine lacks (a GPU, nvcc, an optional package)."""
