"""Training through a swapped kernel: `extract --backward` writes training tasks, and `apply`
puts the kernel's own backward (examples/layernorm_backward's Triton kernels) into the model.

Triton interpreter on CPU, tiny sizes. The losses of a few SGD steps match the unpatched
model's, eager and under torch.compile(fullgraph=True), and the kernel's backward launches."""

import copy
import json
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from kernelevo.cli.app import app
from kernelevo.model.apply import apply
from kernelevo.model.contract import build_model, model_file
from kernelevo.model.extract import read_manifest
from kernelevo.model.swap import _SWAPS, KernelFallbackWarning, module_tensors
from kernelevo.task import load_task
from tests.conftest import ROOT

CANDIDATE = ROOT / "examples/layernorm_backward/triton_candidate.py"
BATCH, WIDTH = 8, 32
STEPS = 3
# Kernel and PyTorch LayerNorm differ by float32 rounding; three SGD steps keep it there.
LOSS_TOLERANCE = 1e-5

MODEL = f'''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, {WIDTH})
        self.norm = nn.LayerNorm({WIDTH})
        self.fc2 = nn.Linear({WIDTH}, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.norm(self.fc1(x))))


def build():
    return Net(), [torch.randn({BATCH}, 16)]
'''

# The example's file as it is, then a ModelNew for the model's norm (no constructor arguments,
# weights named as the LayerNorm's): one file the judge takes as it is.
KERNEL = CANDIDATE.read_text() + f'''

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones({WIDTH}))
        self.bias = nn.Parameter(torch.zeros({WIDTH}))
        self.eps = 1e-5

    def forward(self, x0):
        return _LayerNorm.apply(x0, self.weight, self.bias, self.eps)
'''


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def _extract(folder, *flags: str):
    (folder / "kernels").mkdir(parents=True)
    (folder / "net.py").write_text(MODEL)
    (folder / "kernels" / "norm.py").write_text(KERNEL)
    done = cli("model", "extract", str(folder / "net.py"), "--paths", "norm", "-o",
               str(folder / "tasks"), "--device", "cpu", "--json", *flags)
    assert done.exit_code == 0, done.output
    return folder / "tasks", folder / "kernels"


@pytest.fixture(scope="module")
def training_tasks(tmp_path_factory):
    return _extract(tmp_path_factory.mktemp("train"), "--backward")


class Launches:
    """A Triton kernel that counts its launches."""

    def __init__(self, kernel):
        self.kernel, self.count = kernel, 0

    def __getitem__(self, grid):
        self.count += 1
        return self.kernel[grid]


def _patched(folder, tasks, kernels, monkeypatch):
    """The original model, a patched copy, what apply did and the backward kernel's launches."""
    original = build_model(model_file(folder / "net.py")).module
    model = copy.deepcopy(original)
    applied = apply(model, kernels, tasks=tasks)
    assert [s.path for s in applied.swapped] == ["norm"], applied.skipped
    kernel_globals = _SWAPS[applied.swapped[0].slot].kernel.forward.__globals__
    launches = Launches(kernel_globals["_layernorm_backward"])
    monkeypatch.setitem(kernel_globals, "_layernorm_backward", launches)
    return original, model, applied, launches


def _train(model, compiled: bool, device: str = "cpu", backend: str = "aot_eager") -> list[float]:
    """Losses of STEPS SGD steps on one fixed random batch (compiled by `backend`)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, 16, generator=generator).to(device)
    target = torch.randn(BATCH, 4, generator=generator).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.5)
    step = torch.compile(model, backend=backend, fullgraph=True) if compiled else model
    losses = []
    for _ in range(STEPS):
        loss = F.mse_loss(step(x), target)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses


def test_extract_backward_writes_training_tasks(training_tasks):
    tasks, _ = training_tasks
    assert [t["backward"] for t in read_manifest(tasks)["tasks"]] == [True]
    assert load_task(str(tasks / "norm.py")).asks_backward


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_training_runs_the_kernels_backward_and_matches_the_original(training_tasks, compiled,
                                                                     monkeypatch):
    tasks, kernels = training_tasks
    original, model, applied, launches = _patched(tasks.parent, tasks, kernels, monkeypatch)
    assert applied.swapped[0].training
    expected = _train(original, compiled=False)
    got = _train(model, compiled=compiled)
    assert launches.count == STEPS  # one backward launch per step: the kernel's own ran
    torch.testing.assert_close(got, expected, atol=LOSS_TOLERANCE, rtol=LOSS_TOLERANCE)
    for (name, mine), (_, theirs) in zip(model.named_parameters(), original.named_parameters()):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5, msg=name)
    assert got[-1] < got[0]


def test_the_training_op_and_its_backward_op_pass_opcheck(training_tasks, monkeypatch):
    tasks, kernels = training_tasks
    _, model, applied, launches = _patched(tasks.parent, tasks, kernels, monkeypatch)
    slot = applied.swapped[0].slot
    weights = [t.detach().clone().requires_grad_() for _, t in module_tensors(model.norm)]
    x = torch.randn(BATCH, WIDTH, requires_grad=True)
    results = torch.library.opcheck(torch.ops.kernelevo_model.kernel.default,
                                    ([x], weights, slot))
    assert set(results.values()) == {"SUCCESS"}, results
    assert launches.count > 0  # opcheck's gradient checks went through the kernel's backward
    plain = [w.detach() for w in weights]
    results = torch.library.opcheck(torch.ops.kernelevo_model.kernel_backward.default,
                                    (torch.randn(BATCH, WIDTH), [x.detach()], plain, slot))
    assert set(results.values()) == {"SUCCESS"}, results


def test_at_an_unverified_shape_the_backward_is_the_originals(training_tasks, monkeypatch):
    tasks, kernels = training_tasks
    original, model, _, launches = _patched(tasks.parent, tasks, kernels, monkeypatch)
    x = torch.randn(BATCH + 2, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(x).square().mean().backward()
    assert any(issubclass(w.category, KernelFallbackWarning) for w in caught)
    original(x).square().mean().backward()
    assert launches.count == 0
    torch.testing.assert_close(model.norm.weight.grad, original.norm.weight.grad)


def test_a_forward_only_task_keeps_the_originals_backward(tmp_path, monkeypatch):
    tasks, kernels = _extract(tmp_path)
    assert json.loads((tasks / "manifest.json").read_text())["tasks"][0]["backward"] is False
    original, model, applied, launches = _patched(tmp_path, tasks, kernels, monkeypatch)
    assert not applied.swapped[0].training
    x = torch.randn(BATCH, 16)
    model(x).square().mean().backward()
    original(x).square().mean().backward()
    assert launches.count == 0
    torch.testing.assert_close(model.norm.weight.grad, original.norm.weight.grad,
                               atol=1e-5, rtol=1e-5)


def test_a_training_kernel_with_a_wrong_backward_is_left_out(tmp_path):
    tasks, kernels = _extract(tmp_path, "--backward")
    wrong = KERNEL + textwrap.dedent('''
        class _Wrong(_LayerNorm):
            @staticmethod
            def backward(ctx, dy):
                dx, dw, db, eps = _LayerNorm.backward(ctx, dy)
                return dx, dw * 2, db, eps


        ModelNew.forward = lambda self, x0: _Wrong.apply(x0, self.weight, self.bias, self.eps)
        ''')
    (kernels / "norm.py").write_text(wrong)
    model = build_model(model_file(tmp_path / "net.py")).module
    applied = apply(model, kernels, tasks=tasks)
    assert applied.swapped == []
    assert "the gradient of weight" in applied.skipped[0].reason


def test_apply_checks_a_training_kernel_in_training_mode(training_tasks):
    tasks, kernels = training_tasks
    done = cli("model", "apply", str(tasks.parent / "net.py"), "--kernels", str(kernels),
               "--tasks", str(tasks), "--device", "cpu", "--no-timed", "--json")
    assert done.exit_code == 0, done.output
    verification = json.loads(done.output[done.output.index("{"):])["verification"]
    assert verification["mode"] == "training"
    trained = verification["training"]
    assert trained["correct"] and trained["steps"] >= 1, trained
    assert trained["max_grad_error"] <= LOSS_TOLERANCE
