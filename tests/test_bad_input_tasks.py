"""A task whose own code fails is the user's to fix: told with their file and line, and the step.

The reference runs in a child process from a copy of the task; what the
user sees names their own file, never that copy nor KernelEvo's frames, and
exits 2. A task that hangs at import fails at its own short limit, and a
reference with nothing finite to compare is the task's fault, not the
candidate's.
"""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path

import pytest

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import TaskError
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.parent.oracle_run import _how_it_ended
from kernelevo.evaluate.sandbox.pipe import JobResult
from kernelevo.task import load_task
from tests.test_bad_input import HONEST, cli, refused, said, toml

ADD = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    batch_size = 4
    dim = 40


    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x, y):
            return x + y


    def get_inputs():
        return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


    def get_init_inputs():
        return []
""")
PYTORCH_SEED = Candidate(source="import torch.nn as nn\nclass ModelNew(nn.Module):\n"
                         "    def forward(self, x, y):\n        return x + y\n",
                         backend="pytorch")


def task_file(tmp_path: Path, old: str, new: str) -> Path:
    """The add task with one piece of it changed, as the user's own file."""
    assert old in ADD
    path = tmp_path / "mytask.py"
    path.write_text(ADD.replace(old, new, 1))
    return path


def judge_error(path: Path, **settings) -> str:
    config = EvalConfig(device="cpu", static_checks=False, vary_shapes=False, **settings)
    with pytest.raises(TaskError) as caught:
        Judge(load_task(str(path)), config).evaluate(PYTORCH_SEED)
    return str(caught.value)


def line_of(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1)
                if text in line)


def assert_only_the_users_frames(message: str, path: Path) -> None:
    assert "Traceback" not in message and "kernelevo_task" not in message
    assert "kernelevo/" not in message and "site-packages" not in message
    files = [line.split('"')[1] for line in message.splitlines() if line.startswith("  File ")]
    assert files and set(files) == {str(path)}, message


CASES = {
    "get_inputs raises": (
        "return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]",
        "raise RuntimeError('no inputs today')",
        "the task's get_inputs() raised RuntimeError: no inputs today", "in get_inputs"),
    "__init__ raises": (
        "super().__init__()", "super().__init__()\n        raise ValueError('bad init')",
        "building the task's Model(*get_init_inputs()) raised ValueError: bad init",
        "in __init__"),
    "forward raises": (
        "return x + y", "raise KeyError('bad forward')",
        "the task's Model.forward(*get_inputs()) raised KeyError: 'bad forward'", "in forward"),
    "a missing module": (
        "import torch\n", "import torch\nimport not_a_module\n",
        "importing the task raised ModuleNotFoundError: No module named 'not_a_module'",
        "in <module>"),
    "40 TB of inputs": (
        "return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]",
        "return [torch.randn(10**13), torch.randn(10**13)]",
        "the task's get_inputs() ran out of memory (it tried to allocate 36.38 TiB): give the "
        "task smaller sizes", "in get_inputs"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_tasks_own_error_shows_its_file_and_line(tmp_path, case):
    old, new, words, where = CASES[case]
    path = task_file(tmp_path, old, new)
    message = judge_error(path)
    assert message.startswith(words), message
    bad_line = new.splitlines()[-1].strip()
    assert f'  File "{path}", line {line_of(path, bad_line)}, {where}\n    {bad_line}' in message
    assert_only_the_users_frames(message, path)


def test_the_command_line_shows_it_with_exit_2_and_no_traceback(tmp_path):
    path = task_file(tmp_path, "return x + y", "raise KeyError('bad forward')")
    done = cli("eval", str(path), HONEST, "--local", "--device", "cpu")
    refused(done, "the task's Model.forward(*get_inputs()) raised KeyError",
            f'File "{path}", line {line_of(path, "bad forward")}, in forward')
    assert "kernelevo_task" not in done.output and "oracle.py" not in done.output


@pytest.mark.parametrize("inputs, words", [
    ("[]", "the task's Model.forward(*get_inputs()) raised TypeError: Model.forward() missing "
           "2 required positional arguments: 'x' and 'y'; forward must run on what "
           "get_inputs() returns"),
    ("[1, 2]", "the reference's output 0 is int; outputs must be tensors"),
])
def test_inputs_that_do_not_fit_forward_say_so_without_frames(tmp_path, inputs, words):
    path = task_file(tmp_path, "[torch.randn(batch_size, dim), torch.randn(batch_size, dim)]",
                     inputs)
    message = judge_error(path)
    assert message == words
    assert "Traceback" not in message and "File " not in message


def test_a_task_calling_sys_exit_says_so(tmp_path):
    path = task_file(tmp_path, "import torch\n", "import sys\nsys.exit(3)\nimport torch\n")
    assert judge_error(path) == (
        "importing the task called sys.exit(3): a task must not end its process; remove the "
        "call (or put it under `if __name__ == \"__main__\":`)")


def test_a_task_ending_its_process_says_how_and_what_to_do(tmp_path):
    path = task_file(tmp_path, "import torch\n", "import os\nos._exit(3)\nimport torch\n")
    message = judge_error(path)
    assert message.startswith("the reference oracle exited with code 3 with no error of its "
                              "own: the task's code ended its process"), message
    assert not message.rstrip().endswith(":")


def test_a_tiny_timeout_names_the_limit_and_the_flag(tmp_path):
    path = task_file(tmp_path, "batch_size = 4", "batch_size = 4")
    message = judge_error(path, timeout_s=0.01)
    assert message.startswith("the task's reference ran past the time limit of 0.01 s "
                              "(--timeout, [eval] timeout_s): give a larger --timeout"), message


def test_a_task_that_hangs_at_import_fails_at_the_import_limit(tmp_path):
    path = task_file(tmp_path, "import torch\n", "while True:\n    pass\nimport torch\n")
    config = toml(tmp_path, "[eval]\nimport_timeout_s = 2\n")
    started = time.monotonic()
    done = cli("eval", str(path), HONEST, "--local", "--device", "cpu", "--config", config)
    took_s = time.monotonic() - started
    refused(done, "importing the task took more than 2 s ([eval] import_timeout_s)",
            "move slow work", "raise import_timeout_s")
    # Not the 300 s of timeout_s: the worker, stuck in the same import, went with the oracle.
    assert took_s < 60, took_s


def test_the_import_limit_ends_where_the_whole_limit_takes_over():
    config = EvalConfig(import_timeout_s=60, timeout_s=300)
    hung = JobResult(timed_out=True)
    assert "import_timeout_s" in _how_it_ended(hung, config, imported=False)
    assert "timeout_s): give a larger --timeout" in _how_it_ended(hung, config, imported=True)
    short = EvalConfig(import_timeout_s=60, timeout_s=5)  # --timeout below the import limit
    assert "--timeout" in _how_it_ended(hung, short, imported=False)
    assert "SIGKILL" in _how_it_ended(JobResult(exit_code=-9), config, imported=True)


def test_a_reference_with_nothing_finite_is_the_tasks_fault_not_the_candidates(tmp_path):
    path = task_file(tmp_path, "return x + y", "return (x + y) * float('nan')")
    message = judge_error(path)  # the sizes may be shrunk for the CPU: the count varies
    assert re.fullmatch(r"the reference's output 0 is NaN or Inf everywhere on the task's own "
                        r"inputs \(\d+ values\): no candidate can be checked against it; fix "
                        r"the task's forward or its get_inputs\(\)", message), message


def test_a_reference_with_some_nan_still_judges_a_candidate_that_matches(tmp_path):
    path = task_file(tmp_path, "return x + y", "return torch.log(x) + y")
    seed = Candidate(source="import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
                     "    def forward(self, x, y):\n        return torch.log(x) + y\n",
                     backend="pytorch")
    config = EvalConfig(device="cpu", static_checks=False, vary_shapes=False)
    verdict = Judge(load_task(str(path)), config).evaluate(seed)
    assert verdict.status == "ok", verdict.message


def test_a_search_on_a_task_whose_reference_raises_ends_failed_naming_the_task(tmp_path):
    """Seeds alone, no model: the run must not call 'nothing left to try' a success."""
    path = task_file(tmp_path, "return x + y", "raise RuntimeError('the reference is broken')")
    done = cli("evolve", str(path), "--seed", HONEST, "--candidates", "1",
               "--runs-dir", str(tmp_path / "runs"))
    assert done.exit_code == 1, done.output
    assert "as the task itself failed" in said(done) and "the reference is broken" in said(done)
    # one line; `kernelevo eval` shows the task's own file and line
    assert "kernelevo eval TASK FILE" in said(done) and "Traceback" not in done.output
