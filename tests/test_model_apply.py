"""`kernelevo.apply`: kernels swapped in as a guarded custom op, checked against the original,
under opcheck and torch.compile (Triton interpreter, the example block's sizes)."""

import copy
import os
import subprocess
import sys
import warnings

import pytest
import torch

import kernelevo
from kernelevo.model.apply import apply, originals
from kernelevo.model.contract import build_model, model_file
from kernelevo.model.swap import _SWAPS, KernelFallbackWarning, module_tensors
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples/model_block"
SWAPPED = {"ln1", "ln2", "mlp.gelu", "attn.softmax"}


@pytest.fixture(scope="module")
def patched():
    model = build_model(model_file(EXAMPLE / "block.py")).module
    original = copy.deepcopy(model)
    applied = apply(model, EXAMPLE / "kernels", tasks=EXAMPLE / "tasks")
    return original, model, applied


def _slot_of(applied, path):
    return next(s.slot for s in applied.swapped if s.path == path)


def test_apply_swaps_the_submodules_with_kernels_and_outputs_match(patched):
    original, model, applied = patched
    assert {s.path for s in applied.swapped} == SWAPPED
    assert {s.path for s in applied.skipped} == {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"}
    assert all(s.reason == "no kernel file" for s in applied.skipped)
    assert list(model.state_dict()) == list(original.state_dict())
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), original(x), atol=1e-5, rtol=1e-5)
        with originals(applied):
            assert torch.equal(model(x), original(x))


def test_kernels_use_the_original_weights_not_new_ones(patched):
    _, model, applied = patched
    swap = _SWAPS[_slot_of(applied, "ln2")]
    assert swap.kernel.weight is model.ln2.weight and swap.kernel.bias is model.ln2.bias
    with torch.no_grad():
        model.ln2.weight.mul_(3.0)  # a change to the model's weight is the kernel's too
    try:
        x = torch.randn(2, 16, 64)
        with torch.no_grad():
            expected = torch.nn.functional.layer_norm(x, (64,), model.ln2.weight,
                                                      model.ln2.bias, model.ln2.eps)
            torch.testing.assert_close(model.ln2(x), expected, atol=1e-5, rtol=1e-5)
    finally:
        with torch.no_grad():
            model.ln2.weight.div_(3.0)


def test_the_custom_op_passes_opcheck(patched):
    _, model, applied = patched
    slot = _slot_of(applied, "ln1")
    weights = [t.detach().clone().requires_grad_() for _, t in module_tensors(model.ln1)]
    x = torch.randn(2, 16, 64, requires_grad=True)
    results = torch.library.opcheck(torch.ops.kernelevo_model.kernel.default, ([x], weights, slot))
    assert set(results.values()) == {"SUCCESS"}, results


def test_the_patched_model_compiles_whole_with_the_kernels_in_the_graph(patched):
    original, model, applied = patched
    x = torch.randn(2, 16, 64)
    assert torch._dynamo.explain(model)(x).graph_break_count == 0
    kernel_nodes = []

    def counting(graph, example_inputs):
        kernel_nodes.extend(n for n in graph.graph.nodes if "kernelevo_model" in str(n.target))
        return graph.forward

    with torch.no_grad():
        out = torch.compile(model, backend=counting, fullgraph=True)(x)
    assert len(kernel_nodes) == len(applied.swapped)
    # aot_eager runs the fake implementation and the autograd registration too.
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)(x)
    torch.testing.assert_close(compiled, original(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, compiled.detach())


def test_gradients_through_the_swapped_forward_are_the_originals(patched):
    original, model, _ = patched
    x = torch.randn(2, 16, 64)
    model(x).square().mean().backward()
    original(x).square().mean().backward()
    try:
        torch.testing.assert_close(model.ln1.weight.grad, original.ln1.weight.grad,
                                   atol=1e-4, rtol=1e-4)
    finally:
        model.zero_grad(set_to_none=True)
        original.zero_grad(set_to_none=True)


def test_an_unchecked_shape_falls_back_to_the_original_with_a_warning(patched):
    original, model, _ = patched
    x = torch.randn(2, 24, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            out = model(x)
    fallbacks = [w for w in caught if issubclass(w.category, KernelFallbackWarning)]
    assert {str(w.message).split(":")[0] for w in fallbacks} == SWAPPED
    with torch.no_grad():
        assert torch.equal(out, original(x))


def test_a_shape_checked_at_apply_time_runs_the_kernel(tmp_path):
    model = build_model(model_file(EXAMPLE / "block.py")).module
    applied = apply(model, EXAMPLE / "kernels", tasks=EXAMPLE / "tasks",
                    shapes={"mlp.gelu": [((2, 24, 256),)]})
    gelu = next(s for s in applied.swapped if s.path == "mlp.gelu")
    assert gelu.verified == (((2, 16, 256),), ((2, 24, 256),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelFallbackWarning)
        with torch.no_grad():
            model.mlp.gelu(torch.randn(2, 24, 256))
    applied.restore()
    assert "forward" not in model.mlp.gelu.__dict__


def test_a_wrong_kernel_is_left_out_with_the_reason(tmp_path):
    (tmp_path / "mlp_gelu.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x0):\n        return torch.relu(x0)\n")
    model = build_model(model_file(EXAMPLE / "block.py")).module
    applied = kernelevo.apply(model, tmp_path, tasks=EXAMPLE / "tasks")  # the public API
    assert applied.swapped == []
    wrong = next(s for s in applied.skipped if s.path == "mlp.gelu")
    assert "kernel mlp_gelu.py is wrong at inputs ((2, 16, 256),)" in wrong.reason
    assert "forward" not in model.mlp.gelu.__dict__


def test_triton_loaded_before_the_interpreter_was_set_is_named_without_a_gpu():
    script = ("import triton\nfrom pathlib import Path\n"
              "from kernelevo.model.apply import interpret_triton\n"
              "interpret_triton(Path('k.py'))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "set TRITON_INTERPRET=1 before anything imports triton" in done.stderr
