"""`--max-input-elements` on eval, compare, evolve and profile: the task judged at smaller sizes, said."""

from __future__ import annotations

import json

from kernelevo.cli.options import at_most
from kernelevo.suite.shrink import input_elements
from kernelevo.task import task_from_source
from tests.conftest import ROOT
from tests.test_cli import kernelevo

CONSTANT_SIZES = """
import torch
import torch.nn as nn

batch_size = 512
dim = 2048


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

LITERAL_SIZES = CONSTANT_SIZES.replace("torch.randn(batch_size, dim)", "torch.randn(64, 64)")


def test_eval_judges_a_large_task_at_smaller_sizes_and_says_which():
    done = kernelevo("eval", str(ROOT / "examples/gelu/task.py"),
                     str(ROOT / "examples/gelu/triton_candidate.py"),
                     "--max-input-elements", "65536", "--json")
    assert done.returncode == 0, done.stderr
    assert ("judged at smaller sizes (--max-input-elements): batch_size 8192 -> 256, "
            "dim 8192 -> 256") in done.stderr
    assert json.loads(done.stdout)["reason"] == "passed"


def test_a_task_shrinks_to_the_limit_and_one_that_cannot_is_said(capsys):
    task = task_from_source(CONSTANT_SIZES)
    assert at_most(task, None) is task  # no limit: the task as it is
    assert at_most(task, 1 << 20) is task  # fits already: unchanged, nothing said
    assert capsys.readouterr().err == ""
    smaller = at_most(task, 4096)
    assert input_elements(smaller) <= 4096
    said = capsys.readouterr().err
    assert "judged at smaller sizes" in said and "dim 2048 ->" in said
    # sizes written as literals: nothing to halve, and the user is told
    stuck = task_from_source(LITERAL_SIZES)
    assert input_elements(at_most(stuck, 1024)) == 4096
    assert "no size constant is left to halve" in capsys.readouterr().err
    # no size constant at all: nothing changed, and still said
    bare = task_from_source(LITERAL_SIZES.replace("batch_size = 512\ndim = 2048\n", ""))
    assert at_most(bare, 1024).source == bare.source
    said = capsys.readouterr().err
    assert "judged at smaller sizes" not in said and "no size constant is left to halve" in said


def test_a_limit_below_one_is_refused():
    done = kernelevo("eval", str(ROOT / "examples/gelu/task.py"),
                     str(ROOT / "examples/gelu/triton_candidate.py"), "--max-input-elements", "0")
    assert done.returncode == 2 and "max-input-elements" in done.stderr


def test_every_command_that_loads_one_task_takes_the_limit():
    for command in ("eval", "compare", "evolve", "profile"):
        done = kernelevo(command, "--help")
        assert done.returncode == 0 and "--max-input-elements" in done.stdout, command
