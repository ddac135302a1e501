"""The patched model trains on a GPU: the kernel's own backward (real Triton, not the
interpreter) under eager and torch.compile's default backend, inductor, with no graph break
(run with -m gpu)."""

import copy

import pytest
import torch

from kernelevo.model.apply import apply
from kernelevo.model.contract import build_model, model_file
from kernelevo.model.swap import _SWAPS
from tests.test_model_train import LOSS_TOLERANCE, STEPS, Launches, _extract, _train

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("backend", [None, "inductor"], ids=["eager", "inductor"])
def test_the_patched_model_trains_on_the_gpu_with_the_kernels_backward(tmp_path, backend,
                                                                       monkeypatch):
    tasks, kernels = _extract(tmp_path, "--backward")
    original = build_model(model_file(tmp_path / "net.py")).module.cuda()
    model = copy.deepcopy(original)
    applied = apply(model, kernels, tasks=tasks)
    assert [s.path for s in applied.swapped] == ["norm"], applied.skipped
    assert applied.swapped[0].training
    kernel_globals = _SWAPS[applied.swapped[0].slot].kernel.forward.__globals__
    launches = Launches(kernel_globals["_layernorm_backward"])
    monkeypatch.setitem(kernel_globals, "_layernorm_backward", launches)
    torch._dynamo.reset()
    expected = _train(original, compiled=False, device="cuda")
    got = _train(model, compiled=backend is not None, device="cuda", backend=backend or "")
    assert launches.count == STEPS  # the kernel's own backward ran at every step
    torch.testing.assert_close(got, expected, atol=LOSS_TOLERANCE, rtol=LOSS_TOLERANCE)
    assert got[-1] < got[0]
