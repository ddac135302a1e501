import ast
import os
import textwrap
from pathlib import Path

import pytest

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import TaskError
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import (find_constants, load_task, perturb_sizes, replace_constants,
                            shrink_sizes, task_from_source)
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
    with pytest.raises(TaskError, match="task .*nope.py does not exist: give a KernelBench"):
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
    r"forward\(\*get_inputs\(\)\) raised ValueError: boom": GOOD.replace(
        "return x * 2", "raise ValueError('boom')"),
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

    from kernelevo.evaluate.shared import inputs as task_inputs

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


# Sizes written as expressions, tuple elements and unpacked tuples (KernelBench
# writes `N = 2048 * 2`, `input_shape = (8192 * 2,)` and `D, H, W = 16, 32, 32`).
EXPRESSIONS = textwrap.dedent("""
    import torch
    import torch.nn as nn
    M = 1024 * 2
    K = 2**10
    S = 1 << 12
    half = 4096 // 2 - 1
    neg = -(3 + 4)
    in_channels = 64
    groups = in_channels
    wide = in_channels * 4
    input_shape = (8192 * 2,)
    kernel_size = (3, 5)
    layers = [in_channels, 256]
    depth, height, width = 16, 32, 2 * 16
    typed: int = 48
    label, tail = "\u00e9t\u00e9", 96  # a non-ASCII string before the literal on its line
    spread = (
        512
        * 2
    )
    class Model(nn.Module):
        def forward(self, x):
            return x
    def get_inputs():
        return [torch.randn(M, *input_shape)]
    def get_init_inputs():
        return []
""")


def test_sizes_written_as_expressions_are_found():
    constants = task_from_source(EXPRESSIONS).constants
    assert constants == {
        "M": 2048, "K": 1024, "S": 4096, "half": 2047, "neg": -7, "in_channels": 64,
        "input_shape[0]": 16384, "kernel_size[0]": 3, "kernel_size[1]": 5, "layers[1]": 256,
        "depth": 16, "height": 32, "width": 32, "typed": 48, "tail": 96, "spread": 1024}


def test_constants_computed_from_names_follow_the_names_they_use():
    changed = task_from_source(EXPRESSIONS).with_constants({"in_channels": 17})
    values: dict = {}
    exec(compile(changed.source, "task", "exec"), values)
    assert (values["groups"], values["wide"], values["layers"]) == (17, 68, [17, 256])
    assert "groups" not in changed.constants and "wide" not in changed.constants


def test_replacing_expression_constants_keeps_the_source_valid():
    task = task_from_source(EXPRESSIONS)
    changes = {key: value + 1 for key, value in task.constants.items()}
    changed = task.with_constants(changes)
    assert changed.constants == changes
    values: dict = {}
    exec(compile(changed.source, "task", "exec"), values)
    assert values["input_shape"] == (16385,) and values["kernel_size"] == (4, 6)
    assert (values["depth"], values["height"], values["width"]) == (17, 33, 33)
    assert values["label"] == "\u00e9t\u00e9" and values["tail"] == 97
    assert values["spread"] == 1025 and values["neg"] == -6
    assert "M = 2049\n" in changed.source and "input_shape = (16385,)" in changed.source


def test_shrinking_reaches_sizes_written_as_expressions():
    task = task_from_source(EXPRESSIONS)
    shrunk = shrink_sizes(task.constants)
    assert {"M", "input_shape[0]", "spread"} <= set(shrunk)
    assert task.with_constants(shrunk).constants["input_shape[0]"] == shrunk["input_shape[0]"]
    perturbed = task.with_constants(perturb_sizes(task.constants))
    assert perturbed.constants["M"] == 1793


NOT_CONSTANTS = {
    "float": "N = 2048 * 2.0",
    "true division": "N = 4096 / 2",
    "a call": "N = int(4096)",
    "an unknown name": "N = other * 2",
    "a later name": "N = later\nlater = 64",
    "division by zero": "N = 64 // 0",
    "a huge power": "N = 2 ** 10 ** 9",
    "a huge shift": "N = 1 << 100000",
    "a bool": "N = True",
    "a starred tuple": "N, *rest = 64, 1, 2",
}


@pytest.mark.parametrize("why", sorted(NOT_CONSTANTS))
def test_only_constant_int_expressions_are_sizes(why):
    from kernelevo.task import find_constants

    assert "N" not in find_constants(ast.parse(NOT_CONSTANTS[why])), why


@pytest.mark.parametrize("rebinding", ["N = compute()", "N += 1", "def N():\n    pass",
                                       "import N", "for N in range(3):\n    pass",
                                       "if flag:\n    N = 32", "del N"])
def test_a_name_bound_again_is_no_longer_a_constant(rebinding):
    from kernelevo.task import find_constants

    assert "N" not in find_constants(ast.parse("N = 64\n" + rebinding + "\n"))
    assert find_constants(ast.parse(rebinding + "\nN = 64\n"))["N"] == 64


def _kernelbench_root():
    for root in (os.environ.get("KERNELBENCH_DIR"), "/work/kb"):
        if root and (Path(root) / "KernelBench" / "level1").is_dir():
            return Path(root) / "KernelBench"
    return None


@pytest.mark.skipif(_kernelbench_root() is None, reason="no KernelBench checkout "
                    "(set KERNELBENCH_DIR)")
def test_every_kernelbench_task_has_its_sizes_found_and_replaceable():
    files = sorted(_kernelbench_root().glob("level[1-4]/*.py"))
    assert len(files) > 250
    written_as_expressions = 0
    for file in files:
        source = file.read_text()
        task = task_from_source(source, name=file.stem)
        literal = _literal_sizes(ast.parse(source))
        assert literal <= set(task.constants), (file.name, literal - set(task.constants))
        written_as_expressions += any(
            isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp)
            for node in ast.parse(source).body)
        for changes in (shrink_sizes(task.constants), perturb_sizes(task.constants)):
            changed = task.with_constants(changes)
            assert {k: changed.constants[k] for k in changes} == changes, file.name
            compile(changed.source, file.name, "exec")
    assert written_as_expressions >= 13
    matmul = task_from_source((files[0].parent / "1_Square_matrix_multiplication_.py")
                              .read_text())
    assert matmul.constants["N"] == 4096 and "N" in shrink_sizes(matmul.constants)


def _literal_sizes(tree: ast.Module) -> set[str]:
    """Names of top-level sizes written with int literals and arithmetic only."""
    def is_literal(node: ast.expr) -> bool:
        return all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator,
                                  ast.unaryop)) for n in ast.walk(node)) and \
            all(type(n.value) is int for n in ast.walk(node) if isinstance(n, ast.Constant))
    found = set()
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and isinstance(value, (ast.Tuple, ast.List)):
            found |= {f"{target.id}[{i}]" for i, e in enumerate(value.elts) if is_literal(e)}
        elif isinstance(target, ast.Name) and is_literal(value):
            found.add(target.id)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            found |= {t.id for t, v in zip(target.elts, value.elts) if is_literal(v)}
    return found


def test_a_chained_assignment_is_one_size_that_changes_every_name():
    source = "batch = 16\nheight = width = 128\nchannels = height * 2\n"
    constants = find_constants(ast.parse(source))
    assert constants == {"batch": 16, "height": 128}  # width follows height
    changed = replace_constants(source, perturb_sizes(constants))
    assert "height = width = 113" in changed and "batch = 15" in changed
    assert "channels = height * 2" in changed


def test_perturbed_sizes_always_differ_from_the_task_s():
    for value in range(16, 300):
        assert perturb_sizes({"n": value})["n"] != value
