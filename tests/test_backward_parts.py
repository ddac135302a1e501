"""The backward's parts without processes: the task's flag, the projected loss, the
candidate's calls in the worker, and the judge's decisions on gradients."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn as nn

from kernelevo.config import EvalConfig
from kernelevo.config_file import load_eval_config
from kernelevo.evaluate.analysis.decide_backward import decide_backward, reference_gradients
from kernelevo.evaluate.analysis.reference import ReferenceGradients, ReferenceResult
from kernelevo.evaluate.child.worker_backward import BackwardRuns
from kernelevo.evaluate.shared.gradients import (REPEAT_SCALE, NotDifferentiable, backward_on,
                                                 custom_function_nodes, forward_backward,
                                                 projections)
from kernelevo.evaluate.shared.messages import CheckedCandidate, OracleDone
from kernelevo.evaluate.verdict import REASONS
from kernelevo.schema import settings_from_dict
from kernelevo.task import task_from_source

TASK = """
import torch
dim = 64
{flag}
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    return [torch.randn(dim)]
def get_init_inputs():
    return []
"""


# The task and the settings

@pytest.mark.parametrize("flag, asked", [
    ("", False), ("backward = True", True), ("backward = False", False),
    ("backward = True\nbackward = False", False), ("backward = 1", False),
    ("def f():\n    backward = True", False)])
def test_a_task_asks_for_its_backward_with_a_top_level_true(flag, asked):
    task = task_from_source(TASK.format(flag=flag))
    assert task.asks_backward is asked
    assert task.with_constants({"dim": 31}).asks_backward is asked
    if "True" in flag:
        assert "backward" not in task.constants  # a flag, not a size to vary


def test_the_run_or_the_task_turns_the_backward_on(tmp_path):
    plain, asking = task_from_source(TASK.format(flag="")), \
        task_from_source(TASK.format(flag="backward = True"))
    assert EvalConfig().backward is False
    assert not backward_on(plain, EvalConfig())
    assert backward_on(asking, EvalConfig())
    assert backward_on(plain, EvalConfig(backward=True))
    assert settings_from_dict(EvalConfig, {"backward": True}).backward is True
    settings = tmp_path / "kernelevo.toml"
    settings.write_text("[eval]\nbackward = true\n")
    assert load_eval_config(str(settings)).backward is True


# The projected loss

def test_projections_are_fresh_per_seed_and_follow_each_output():
    outputs = [torch.zeros(3, 5), torch.zeros(4, dtype=torch.int64),
               torch.zeros(2, dtype=torch.float16)]
    first = projections(7, outputs)
    again = projections(7, outputs)
    other = projections(8, outputs)
    assert first[1] is None and first[0].shape == (3, 5) and first[2].dtype == torch.float16
    assert torch.equal(first[0], again[0]) and torch.equal(first[2], again[2])
    assert not torch.equal(first[0], other[0])
    assert first[0].std() > 0.5  # random, not a constant gradient
    scaled = projections(7, outputs, REPEAT_SCALE)
    assert torch.equal(scaled[0], first[0] * REPEAT_SCALE)


def test_gradients_are_those_of_the_sum_of_outputs_times_the_projection():
    torch.manual_seed(0)
    model = nn.LayerNorm(6)
    x = torch.randn(4, 6)
    result = forward_backward(model, [x], seed=11)
    assert result.names == ["input 0 (input)", "parameter weight", "parameter bias"]
    leaf = x.clone().requires_grad_(True)
    out = model(leaf)
    loss = (out * projections(11, [out])[0]).sum()
    expected = torch.autograd.grad(loss, [leaf, model.weight, model.bias])
    for got, want in zip(result.gradients, expected):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert result.custom_functions == [] and result.grad_fns == ["NativeLayerNormBackward0"]
    assert x.grad is None and model.weight.grad is None  # nothing accumulated


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_the_graph_search_finds_a_custom_function_under_pytorch_ops():
    x = torch.randn(3, requires_grad=True)
    assert custom_function_nodes([_Double.apply(x) + 1]) == ["_DoubleBackward"]
    assert custom_function_nodes([x * 2 + 1]) == []


def test_an_output_without_a_graph_is_not_differentiable():
    class Detached(nn.Module):
        def forward(self, x):
            return x.detach() * 2

    with pytest.raises(NotDifferentiable, match="grad_fn is None"):
        forward_backward(Detached(), [torch.randn(3)], seed=1)


def test_an_input_the_output_ignores_gets_a_zero_gradient():
    class First(nn.Module):
        def forward(self, x, y):
            return x * 3

    result = forward_backward(First(), [torch.randn(4), torch.randn(4)], seed=2)
    assert result.names == ["input 0 (x)", "input 1 (y)"]
    assert torch.equal(result.gradients[1], torch.zeros(4))


# The candidate's calls in the worker

class _Switch:
    """What BackwardRuns needs of guards.KernelSwitch: on or off, and launches counted."""

    def __init__(self) -> None:
        self.enabled, self.launches = True, 0

    def set(self, enabled: bool) -> None:
        self.enabled = enabled


class _Task:
    @staticmethod
    def get_inputs():
        return [torch.randn(5, 8)]


def _kernel_model(switch: _Switch, raise_in_backward: bool = False) -> nn.Module:
    """A scale by a weight whose backward 'launches' a kernel: with the switch off it leaves
    its gradient buffers unwritten, as a skipped Triton launch does."""

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x * weight

        @staticmethod
        def backward(ctx, grad):
            if raise_in_backward:
                raise RuntimeError("kernel failed to launch")
            x, weight = ctx.saved_tensors
            dx, dw = torch.full_like(x, float("nan")), torch.full_like(weight, float("nan"))
            if switch.enabled:
                switch.launches += 1
                dx, dw = grad * weight, (grad * x).sum(0)
            return dx, dw

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(8))

        def forward(self, x):
            return Scale.apply(x, self.weight)

    return Model()


def _sets() -> list[tuple[int, None]]:
    return [(101, None), (202, None), (303, None)]


def test_the_worker_sends_gradients_a_scaled_repeat_and_a_knockout():
    switch = _Switch()
    runs = BackwardRuns(_kernel_model(switch), _Task, _sets(), "cpu", torch.float32, switch)
    runs.knockout_run()
    assert switch.enabled and switch.launches == 0  # off during the knockout, on again after
    bundle, report = runs.finish()
    assert sorted(bundle) == ["grad_0", "grad_1", "grad_2", "grad_knockout", "grad_out_0",
                              "grad_out_1", "grad_out_2", "grad_repeat"]
    assert torch.isnan(bundle["grad_knockout"][0]).all()
    torch.testing.assert_close(bundle["grad_repeat"][0], bundle["grad_0"][0] * REPEAT_SCALE)
    assert not torch.allclose(bundle["grad_0"][0], bundle["grad_1"][0])
    assert report["backward_launches"] == 4 and report["custom_functions"] == ("ScaleBackward",)
    assert report["grad_names"] == ("input 0 (x)", "parameter weight")
    assert report["backward_problem"] is None and report["backward_error"] is None


def test_with_one_input_set_left_there_is_no_knockout_to_spare():
    switch = _Switch()
    runs = BackwardRuns(_kernel_model(switch), _Task, _sets()[:1], "cpu", torch.float32, switch)
    runs.knockout_run()
    bundle, _ = runs.finish()
    assert "grad_knockout" not in bundle and "grad_0" in bundle


def test_a_backward_that_raises_is_reported_not_raised():
    switch = _Switch()
    runs = BackwardRuns(_kernel_model(switch, raise_in_backward=True), _Task, _sets(), "cpu",
                        torch.float32, switch)
    runs.knockout_run()
    bundle, report = runs.finish()
    assert bundle == {} and "kernel failed to launch" in report["backward_error"]


# The judge's decisions

NAMES = ["input 0 (x)", "parameter weight"]


def _reference(count: int = 3, stress: dict[int, str] | None = None) -> ReferenceResult:
    torch.manual_seed(5)
    gradients = {n: [torch.randn(5, 8), torch.randn(8)] for n in range(count)}
    backward = ReferenceGradients(by_set=gradients, names=tuple(NAMES),
                                  tolerances=((1e-4, 1e-4),) * 2, ops=frozenset({"mul", "sum"}))
    return ReferenceResult(outputs=tuple([torch.randn(5, 8)] for _ in range(count)),
                           seeds=tuple(range(count)), variants=(None,) * count,
                           stress=stress or {}, passthrough=(), structure="tensor",
                           ops=frozenset({"mul"}), flops=0, bytes_moved=0,
                           tolerances=((1e-4, 1e-4),), backward=backward)


def _gradients(reference: ReferenceResult) -> dict[int, list[torch.Tensor]]:
    assert reference.backward is not None
    return dict(reference.backward.by_set)


def _honest(reference: ReferenceResult) -> dict:
    gradients = _gradients(reference)
    bundle = {f"grad_{n}": [g.clone() for g in grads] for n, grads in gradients.items()}
    bundle["grad_repeat"] = [g * REPEAT_SCALE for g in gradients[0]]
    bundle["grad_knockout"] = [torch.full_like(g, float("nan")) for g in gradients[1]]
    bundle.update({f"grad_out_{n}": [v.clone() for v in values]
                   for n, values in enumerate(reference.outputs)})
    return bundle


def _report(**changes) -> CheckedCandidate:
    fields = {"candidate": 0, "bundle": {}, "grad_names": tuple(NAMES),
              "custom_functions": ("ScaleBackward",), "grad_fns": ("ScaleBackward",),
              "backward_launches": 4, "backward_ops": ()}
    return CheckedCandidate(**{**fields, **changes})


def _decide(bundle, reference, report=None, backend="triton", policy="default"):
    return decide_backward(report or _report(), bundle, reference, reference.backward, backend,
                           policy, "cpu")


def test_every_new_reason_is_listed():
    for reason in ("backward_failed", "not_differentiable", "gradient_mismatch",
                   "ghost_backward", "reference_autograd", "cached_gradients"):
        assert reason in REASONS


def test_honest_gradients_pass_and_the_note_states_the_tolerances():
    reference = _reference()
    decision = _decide(_honest(reference), reference)
    assert decision.reason is None, decision.message
    assert any("gradients checked: input 0 (x), parameter weight on 3 input set(s)" in note
               and "atol 0.0001, rtol 0.0001" in note for note in decision.notes)


def test_a_wrong_gradient_names_the_tensor_the_set_and_its_max_error():
    reference = _reference()
    bundle = _honest(reference)
    bundle["grad_1"][1] = bundle["grad_1"][1] + 0.5
    decision = _decide(bundle, reference)
    assert decision.reason == "gradient_mismatch"
    assert decision.message.startswith("gradient of parameter weight on input set 1")
    assert "max abs error 0.5" in decision.message
    assert decision.metrics is not None and decision.metrics.max_abs_error == pytest.approx(0.5)


def test_the_same_gradients_for_every_set_fail():
    reference = _reference()
    bundle = _honest(reference)
    for number in (1, 2):  # a cached or constant gradient: right on the first set only
        bundle[f"grad_{number}"] = [g.clone() for g in bundle["grad_0"]]
    assert _decide(bundle, reference).reason == "gradient_mismatch"


def test_gradients_kept_from_an_earlier_call_fail_the_repeat():
    reference = _reference()
    bundle = _honest(reference)
    bundle["grad_repeat"] = [g.clone() for g in bundle["grad_0"]]
    decision = _decide(bundle, reference)
    assert decision.reason == "cached_gradients"
    assert "repeated call on input set 0" in decision.message


def test_a_gradient_wrong_only_on_the_stress_set_says_so():
    reference = _reference(stress={2: "stress set of scale 60"})
    bundle = _honest(reference)
    bundle["grad_2"][0] = bundle["grad_2"][0] * 1.01
    decision = _decide(bundle, reference)
    assert decision.reason == "stress_inputs_failed"
    assert "stress set of scale 60" in decision.message and "gradient of input 0" in \
        decision.message


@pytest.mark.parametrize("changes, reason", [
    ({"backward_problem": "no floating output carries a gradient function"},
     "not_differentiable"),
    ({"backward_error": "Traceback ...\nRuntimeError: boom"}, "backward_failed"),
    ({"custom_functions": (), "grad_fns": ("NativeLayerNormBackward0",)},
     "reference_autograd"),
    ({"backward_ops": ("mul", "sum", "empty")}, "reference_autograd"),
    ({"backward_launches": 0}, "ghost_backward")])
def test_the_backward_must_be_the_candidates_own(changes, reason):
    reference = _reference()
    decision = _decide(_honest(reference), reference, _report(**changes))
    assert decision.reason == reason, decision.message


def test_the_forward_under_grad_must_give_the_forwards_outputs_with_its_own_ops():
    reference = _reference()
    bundle = _honest(reference)
    bundle["grad_out_1"][0] = bundle["grad_out_1"][0] + 1e-2
    decision = _decide(bundle, reference)
    assert decision.reason == "output_mismatch"
    assert decision.message.startswith("forward under autograd (as training calls it), input "
                                       "set 1 output 0")
    # Its own kernels without grad, the reference's ops with it: what training would run.
    reused = _decide(_honest(reference), reference, _report(grad_forward_ops=("mul", "add")))
    assert reused.reason == "reference_ops_reused" and "under autograd" in reused.message
    strict = _decide(_honest(reference), reference, _report(grad_forward_ops=("add",)),
                     policy="strict")
    assert strict.reason == "library_compute" and "forward under autograd" in strict.message


def test_pytorch_compute_in_backward_is_library_compute_under_strict():
    reference = _reference()
    decision = _decide(_honest(reference), reference, _report(backward_ops=("add",)),
                       policy="strict")
    assert decision.reason == "library_compute" and "during backward" in decision.message
    assert _decide(_honest(reference), reference, _report(backward_ops=("add",))).reason \
        is None


def test_gradients_unchanged_with_the_kernels_off_are_a_ghost():
    reference = _reference()
    bundle = _honest(reference)
    bundle["grad_knockout"] = [g.clone() for g in _gradients(reference)[1]]
    assert _decide(bundle, reference).reason == "ghost_backward"
    bundle["grad_knockout"][0] = torch.full_like(bundle["grad_knockout"][0], float("nan"))
    decision = _decide(bundle, reference)  # dweight by PyTorch, dx its own: noted
    assert decision.reason is None
    assert any("gradient of parameter weight still matched" in note for note in decision.notes)


def test_a_knockout_set_without_judged_gradients_is_noted():
    reference = _reference(count=2)
    bundle = _honest(reference)
    gradients = _gradients(reference)
    gradients.pop(1)  # the stress set, its reference gradients unsure
    reference = replace(reference, backward=replace(reference.backward, by_set=gradients))
    decision = _decide(bundle, reference)
    assert decision.reason is None
    assert any("backward knockout not checked" in note for note in decision.notes)


def test_a_pytorch_candidate_is_judged_on_values_only():
    reference = _reference()
    report = _report(custom_functions=(), backward_launches=0, backward_ops=("mul", "sum"))
    assert _decide(_honest(reference), reference, report, backend="pytorch").reason is None


def test_parameters_pair_in_order_when_the_candidate_names_them_its_own_way():
    reference = _reference()
    report = _report(grad_names=("input 0 (inputs)", "parameter scale"))
    assert _decide(_honest(reference), reference, report).reason is None
    bundle = _honest(reference)
    bundle = {k: v[:1] for k, v in bundle.items()}
    decision = _decide(bundle, reference, _report(grad_names=("input 0 (x)",)))
    assert decision.reason == "gradient_mismatch"
    assert "parameter weight [8]" in decision.message and "hold its parameters" in \
        decision.message


def test_gradient_tolerances_follow_the_dtype_then_the_task_then_the_run():
    bundle = {"grad_0": [torch.zeros(2)], "grad_2": [torch.zeros(2)]}
    final = OracleDone(kept_sets=(0, 1, 2), variants_used=(None, None, 3.0), stress={},
                       structure="tensor", ops=(), flops=0, bytes=0, output_dtypes=("float16",),
                       grad_names=("input 0",), grad_dtypes=("float16",), grad_sets=(0, 2))
    kept = reference_gradients(final, bundle, EvalConfig())
    assert kept.tolerances == ((1e-2, 1e-2),) and sorted(kept.by_set) == [0, 2]
    task_set = OracleDone(**{**final.fields_json(), "grad_atol": 0.05, "grad_rtol": 0.02})
    assert reference_gradients(task_set, bundle, EvalConfig()).tolerances == ((0.05, 0.02),)
    assert reference_gradients(task_set, bundle, EvalConfig(atol=1e-3)).tolerances \
        == ((1e-3, 0.02),)
