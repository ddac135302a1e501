"""The check of a candidate's outputs during timing: a bit-equal output skips the full comparison.

The shortcut may only ever say "passes" where compare_tensor would, and must
leave every other output (changed, NaN, another dtype, shape or type) to it.
"""

from __future__ import annotations

import pytest
import torch

from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child import worker_timing
from kernelevo.evaluate.child.worker_timing import _consistency, _identical

TOLERANCES = [[1e-4, 1e-4]]


def _checked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """compare_tensor's calls from the consistency check, recorded (it still runs)."""
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def recording(out, ref, atol, rtol, label="output"):
        calls.append((out, ref))
        return compare_tensor(out, ref, atol, rtol, label)

    monkeypatch.setattr(worker_timing, "compare_tensor", recording)
    return calls


def test_a_bit_equal_output_passes_without_the_full_comparison(monkeypatch):
    calls = _checked(monkeypatch)
    reference = torch.randn(64, 33)
    kept = {("candidate_0", 0): [reference.clone()]}
    assert _consistency("candidate_0", kept, [[reference]], TOLERANCES) is None
    assert calls == []


@pytest.mark.parametrize("change", ["one_value", "nan_both", "dtype", "shape", "subclass"])
def test_anything_not_bit_equal_gets_the_full_comparison(monkeypatch, change):
    calls = _checked(monkeypatch)
    reference = torch.randn(64, 33)
    got = reference.clone()
    if change == "one_value":
        got[3, 7] += 1.0
    elif change == "nan_both":  # NaN never equals itself: compared in full (and passes there)
        reference[0, 0] = float("nan")
        got = reference.clone()
    elif change == "dtype":
        got = got.double()
    elif change == "shape":
        got = got.reshape(33, 64)
    else:
        class Other(torch.Tensor):
            pass
        got = got.as_subclass(Other)
    assert not _identical(got, reference)
    problem = _consistency("candidate_0", {("candidate_0", 0): [got]}, [[reference]],
                           TOLERANCES)
    assert len(calls) == 1
    expected = compare_tensor(got, reference, *TOLERANCES[0], "x")
    assert (problem is None) == (expected.reason is None)
    if change in ("one_value", "dtype", "shape", "subclass"):
        assert problem is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.bool])
def test_every_bit_equal_output_is_one_compare_tensor_passes(dtype):
    generator = torch.Generator().manual_seed(0)
    for size in [(0,), (1,), (7, 5), (3, 4, 5)]:
        base = torch.randn(size, generator=generator) * 100
        base.view(-1)[:1] = float("inf") if base.numel() and dtype.is_floating_point else base.view(-1)[:1]
        reference = base.to(dtype)
        got = reference.clone()
        assert _identical(got, reference)
        assert compare_tensor(got, reference, 1e-6, 1e-6).reason is None


def _task_module(tmp_path, name: str, source: str):
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tf32_tolerance_applies_to_convolution_tasks_only(tmp_path) -> None:
    """cuDNN's TF32 moves only convolutions: other tasks keep their strict re-check."""
    from kernelevo.evaluate.child.worker_timing import uses_convolution

    gemm = _task_module(tmp_path, "gemm_task", (
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(8, 8)\n"
        "    def forward(self, x):\n        return torch.relu(self.fc(x))\n"))
    conv = _task_module(tmp_path, "conv_task", (
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.c = torch.nn.ConvTranspose3d(2, 2, 3)\n"
        "    def forward(self, x):\n        return self.c(x)\n"))
    functional = _task_module(tmp_path, "functional_task", (
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.randn(2, 2, 3, 3))\n"
        "    def forward(self, x):\n        return torch.nn.functional.conv2d(x, self.w)\n"))
    assert not uses_convolution(gemm, gemm.Model())
    assert uses_convolution(conv, conv.Model())
    assert uses_convolution(functional, functional.Model())
    assert uses_convolution(conv, None)  # no eager baseline: the source decides
