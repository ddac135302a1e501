"""The task's own code as the oracle runs it, and what it raises told as the user's traceback.

The oracle imports a copy of the task from its scratch folder and calls it
from its own functions; a raw traceback named that copy and showed the
harness's frames. Here a failure names the step (importing the task, its
get_inputs(), its forward...) and the lines of the user's own file.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kernelevo.evaluate.analysis import oom

_FRAMES = 8  # of the task's own, innermost last
_MESSAGE_CHARS = 600


class TaskProblem(Exception):
    """The task itself is broken; the message says how to fix it."""


@dataclass(frozen=True)
class Step:
    """What the oracle does with the task's code, and what that code must do."""

    doing: str
    must: str


IMPORT = Step("importing the task", "fix the task file, or install what it imports")
INIT_INPUTS = Step("the task's get_init_inputs()", "it must return Model's constructor "
                   "arguments as a list")
BUILD = Step("building the task's Model(*get_init_inputs())", "Model must build from what "
             "get_init_inputs() returns")
INPUTS = Step("the task's get_inputs()", "it must return the inputs of Model.forward as a "
              "list")
FORWARD = Step("the task's Model.forward(*get_inputs())", "forward must run on what "
               "get_inputs() returns")
ANY = Step("running the task", "fix the task")


class TaskRaised(Exception):
    """The task's own code raised `error` during `step`."""

    def __init__(self, step: Step, error: BaseException) -> None:
        super().__init__(f"{step.doing} raised {type(error).__name__}")
        self.step, self.error = step, error

    def describe(self, copy_path: str, shown_as: str) -> str:
        """One line (the step, the exception, the fix), then the frames of the task's file.

        `copy_path` is the copy the oracle imported; its frames are shown as
        `shown_as`, the user's file. Frames of anything else are left out.
        """
        error = self.error
        frames = [frame for frame in traceback.extract_tb(error.__traceback__)
                  if _same_file(frame.filename, copy_path)][-_FRAMES:]
        if oom.is_out_of_memory(error):
            size = oom.requested_size(str(error))
            lines = [f"{self.step.doing} ran out of memory"
                     + (f" (it tried to allocate {size})" if size else "")
                     + ": give the task smaller sizes (--max-input-elements)"]
        else:
            text = " ".join(str(error).split())[:_MESSAGE_CHARS]
            fix = "fix the task (the lines below are its own)" if frames else self.step.must
            lines = [f"{self.step.doing} raised {type(error).__name__}"
                     + (f": {text}" if text else "") + f"; {fix}"]
        for frame in frames:
            lines.append(f'  File "{shown_as}", line {frame.lineno}, in {frame.name}')
            if frame.line:
                lines.append(f"    {frame.line}")
        return "\n".join(lines)


@contextmanager
def task_code(step: Step, keep: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Run the task's code for `step`: what it raises is the task's problem, told as the step's.

    Exceptions of the `keep` types (the harness's own checks) pass as they are.
    A task that calls sys.exit() would end the oracle with no word of why; it
    is told here instead.
    """
    passing: tuple[type[Exception], ...] = (TaskProblem, TaskRaised, *keep)
    try:
        yield
    except passing:
        raise
    except SystemExit as stop:
        raise TaskProblem(f"{step.doing} called sys.exit({stop.code!r}): a task must not "
                          "end its process; remove the call (or put it under "
                          "`if __name__ == \"__main__\":`)") from None
    except Exception as exc:
        raise TaskRaised(step, exc) from None


def _same_file(filename: str, path: str) -> bool:
    return filename == path or os.path.realpath(filename) == os.path.realpath(path)
