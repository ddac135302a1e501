import textwrap

import pytest

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import TaskError
from kernelevo.evaluate.judge import Judge
from kernelevo.task import load_task, perturb_sizes, shrink_sizes, task_from_source
from tests.conftest import ROOT, write

GOOD = textwrap.dedent("""
    import torch
    import torch.nn as nn
    batch_size = 8
    dim = 40
    class Model(nn.Module):
        def forward(self, x):
            return x * 2
    def get_inputs():
        return [torch.randn(batch_size, dim)]
    def get_init_inputs():
        return []
""")
SEED = Candidate(source="import torch.nn as nn\nclass ModelNew(nn.Module):\n"
                 "    def forward(self, x):\n        return x * 2\n", backend="pytorch")


def judge_with(tmp_path, source):
    task = load_task(str(write(tmp_path, "task.py", source)))
    return Judge(task, EvalConfig(device="cpu", policy="permissive", static_checks=False))


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(TaskError, match="not found: .*nope.py"):
        load_task(str(tmp_path / "nope.py"))


def test_missing_parts_are_named():
    with pytest.raises(TaskError, match="lacks Model, get_init_inputs"):
        task_from_source("def get_inputs():\n    return []\n")


def test_syntax_error_gives_the_line():
    with pytest.raises(TaskError, match="line 1"):
        task_from_source("def (:\n")


def test_kernelbench_reference_resolves_in_a_checkout(tmp_path, monkeypatch):
    folder = tmp_path / "KernelBench" / "level1"
    folder.mkdir(parents=True)
    (folder / "19_ReLU.py").write_text(GOOD)
    monkeypatch.setenv("KERNELBENCH_DIR", str(tmp_path))
    assert load_task("kernelbench:level1/19").name == "19_ReLU"
    assert load_task("L1/19").path.endswith("19_ReLU.py")
    with pytest.raises(TaskError, match="no problem 7"):
        load_task("kernelbench:level1/7")


def test_kernelbench_reference_without_checkout_says_how(monkeypatch):
    monkeypatch.delenv("KERNELBENCH_DIR", raising=False)
    with pytest.raises(TaskError, match="--kernelbench-dir"):
        load_task("kernelbench:level2/76")


def test_constants_shrink_to_small_odd_sizes_and_perturb():
    shrunk = shrink_sizes({"batch_size": 4096, "dim": 8192, "kernel": 3})
    assert "kernel" not in shrunk
    assert all(v % 2 == 1 for v in shrunk.values())
    assert shrunk["batch_size"] * shrunk["dim"] <= (1 << 15) * 4
    perturbed = perturb_sizes({"dim": 8192, "k": 3})
    assert perturbed == {"dim": 7169}


def test_with_constants_rewrites_only_the_literals():
    task = task_from_source(GOOD)
    changed = task.with_constants({"dim": 17})
    assert "dim = 17" in changed.source and "batch_size = 8" in changed.source
    assert changed.constants["dim"] == 17


def test_good_task_judges_a_pytorch_seed_ok(tmp_path):
    verdict = judge_with(tmp_path, GOOD).evaluate(SEED)
    assert verdict.status == "ok", verdict.message


BROKEN = {
    "the reference raised": GOOD.replace("return x * 2", "raise ValueError('boom')"),
    "must return a list": GOOD.replace("def get_init_inputs():\n    return []",
                                       "def get_init_inputs():\n    return 3"),
    "not deterministic": GOOD.replace("return x * 2", "return x * torch.rand(1)"),
    "inputs must be tensors": GOOD.replace("return [torch.randn(batch_size, dim)]",
                                           "return ['not a tensor']"),
    "outputs must be tensors": GOOD.replace("return x * 2", "return 'text'"),
}


@pytest.mark.parametrize("message", sorted(BROKEN))
def test_broken_references_raise_task_errors(tmp_path, message):
    assert BROKEN[message] != GOOD
    with pytest.raises(TaskError, match=message):
        judge_with(tmp_path, BROKEN[message]).evaluate(SEED)


def test_a_file_named_task_takes_its_folders_name():
    assert load_task(str(ROOT / "examples" / "softmax" / "task.py")).name == "softmax"


def test_input_sets_are_made_once_per_process_and_kept_unless_large(tmp_path, monkeypatch):
    import torch

    from kernelevo.evaluate import inputs as task_inputs

    source = (ROOT / "examples" / "softmax" / "task.py").read_text()
    module = task_inputs.import_source(source, "kept_inputs_task", tmp_path)
    first = task_inputs.kept_inputs(module, 7, "cpu", torch.float32)
    assert task_inputs.kept_inputs(module, 7, "cpu", torch.float32) is first
    other = task_inputs.kept_inputs(module, 8, "cpu", torch.float32)
    assert other is not first and not torch.equal(other[0], first[0])
    assert torch.equal(first[0], task_inputs.make_inputs(module, 7, "cpu", torch.float32)[0])
    monkeypatch.setattr(task_inputs, "_KEEP_LIMIT_BYTES", 0)
    assert task_inputs.kept_inputs(module, 9, "cpu", torch.float32) is not \
        task_inputs.kept_inputs(module, 9, "cpu", torch.float32)
