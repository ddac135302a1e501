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


class _Tf32Eager(torch.nn.Module):
    """An eager reference whose output moves by `bump` at one element while cuDNN's TF32 is on.

    It also writes into its input, as a reference may: the sets must stay pristine.
    """

    def __init__(self, extra: str = "") -> None:
        super().__init__()
        self.extra, self.flags = extra, []

    def forward(self, x, bump):
        self.flags.append(torch.backends.cudnn.allow_tf32)
        out = x * 0.5
        if torch.backends.cudnn.allow_tf32:
            out[0, 0] += bump
        x.add_(1.0)
        if self.extra == "int":
            return out, torch.arange(4)
        if self.extra == "shape":
            return out, out[:2] if torch.backends.cudnn.allow_tf32 else out[:3]
        return out


def _tf32_sets(*bumps: float, scale: float = 1.0):
    generator = torch.Generator().manual_seed(0)
    sets = []
    for bump in bumps:
        x = torch.rand(8, 16, generator=generator) * scale
        x[0, 0] = 0.2 * scale
        sets.append([x, bump])
    return sets


@pytest.fixture
def tf32_flag():
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True  # as set_user_backend leaves it when timing in TF32
    yield
    torch.backends.cudnn.allow_tf32 = before


def test_tf32_atol_is_three_times_eagers_error_beyond_rtol_on_every_set(tf32_flag):
    from kernelevo.evaluate.child.tf32_tolerance import tf32_tolerances

    eager = _Tf32Eager()
    sets = _tf32_sets(0.05, 0.08, 0.03)  # the worst set is not the first
    pristine = [[x.clone(), bump] for x, bump in sets]
    widened, note = tf32_tolerances(eager, sets, [[1e-4, 1e-5]])
    # eager's fp32 output at [0, 0] is 0.1: rtol 1e-2 (the floor) covers 0.001 of the 0.08
    assert widened[0][0] == pytest.approx(3 * (0.08 - 0.01 * 0.1), rel=1e-4)
    assert widened[0][1] == 1e-2
    assert "x3" in note and "atol 0.237 (output 0)" in note
    assert eager.flags == [False, True] * 3  # every set, fp32 then TF32
    assert torch.backends.cudnn.allow_tf32 is True  # restored to what the timing set
    for (x, bump), (kept, kept_bump) in zip(sets, pristine):  # eager ran on clones
        assert torch.equal(x, kept) and bump == kept_bump


def test_tf32_atol_is_in_compare_tensors_units():
    """compare_tensor scales atol by max(1, rms): eager's own TF32 output passes at a third."""
    from kernelevo.evaluate.child.tf32_tolerance import tf32_tolerances

    eager = _Tf32Eager()
    (x, bump), = _tf32_sets(0.5, scale=20.0)  # rms of the output about 5.8
    widened, _ = tf32_tolerances(eager, [[x, bump]], [[1e-4, 1e-4]])
    atol, rtol = widened[0]
    before = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        exact = eager(x.clone(), bump)
        torch.backends.cudnn.allow_tf32 = True
        fast = eager(x.clone(), bump)
    finally:
        torch.backends.cudnn.allow_tf32 = before
    assert compare_tensor(fast, exact, atol / 3 * 1.001, rtol).reason is None
    assert compare_tensor(fast, exact, atol / 3 * 0.99, rtol).reason == "output_mismatch"


@pytest.mark.parametrize("flag", [True, False])
def test_tf32_floor_holds_when_eager_is_unmoved_and_the_flag_is_restored(flag):
    from kernelevo.evaluate.child.tf32_tolerance import TF32_FLOOR, tf32_tolerances

    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = flag
    try:
        widened, note = tf32_tolerances(_Tf32Eager(), _tf32_sets(0.0, 0.0),
                                        [[1e-4, 1e-4], [0.02, 1e-5]])
        assert torch.backends.cudnn.allow_tf32 is flag
    finally:
        torch.backends.cudnn.allow_tf32 = before
    # as the fixed rule had it; a task's own looser atol stands
    assert widened == [[TF32_FLOOR, TF32_FLOOR], [0.02, TF32_FLOOR]]
    assert "within them" in note


@pytest.mark.parametrize("extra", ["int", "shape"])
def test_tf32_unmeasurable_outputs_keep_the_fixed_rule(tf32_flag, extra):
    from kernelevo.evaluate.child.tf32_tolerance import tf32_tolerances

    widened, note = tf32_tolerances(_Tf32Eager(extra), _tf32_sets(0.05),
                                    [[1e-4, 1e-4], [1e-4, 1e-4]])
    assert widened[0][0] == pytest.approx(3 * (0.05 - 0.001), rel=1e-4)
    assert widened[1] == [1e-2, 1e-2]
    assert "(output 0)" in note and "(output 1)" not in note


@pytest.mark.parametrize("error", [RuntimeError("cuDNN error"),
                                   torch.OutOfMemoryError("CUDA out of memory")])
def test_tf32_an_eager_that_raises_falls_back_to_the_fixed_rule(tf32_flag, error):
    from kernelevo.evaluate.child.tf32_tolerance import tf32_tolerances

    class Failing(_Tf32Eager):
        def forward(self, x, bump):
            out = super().forward(x, bump)
            if torch.backends.cudnn.allow_tf32:
                raise error
            return out

    sets = _tf32_sets(0.05)
    pristine = sets[0][0].clone()
    widened, note = tf32_tolerances(Failing(), sets, [[1e-4, 1e-4], [0.5, 1e-4]])
    assert widened == [[1e-2, 1e-2], [0.5, 1e-2]]
    assert "not measured" in note
    assert ("out of memory" in note) == isinstance(error, torch.OutOfMemoryError)
    assert torch.backends.cudnn.allow_tf32 is True
    assert torch.equal(sets[0][0], pristine)


def test_run_timing_holds_convolution_tasks_to_eagers_tf32_error():
    """The timing uses the measure (not the fixed rule alone) and says so in its notes."""
    import inspect

    source = inspect.getsource(worker_timing.run_timing)
    assert "tf32_tolerances(eager, sets, tolerances)" in source
    assert "tf32_notes" in source.split("channel.send(Timing(")[0].split("notes = ")[-1]
