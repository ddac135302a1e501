"""A candidate's forward and backward calls in the worker, for a task whose backward is judged.

Beside its forward checks (worker.py, `_SetRuns`), each candidate runs
forward with grad and backward of the projected loss (gradients.py) on every
input set, then once more on set 0 with the projection scaled (a gradient
cached from the first call fails there). Its outputs under grad, what
training computes with, are sent too: they must match the reference's as
the forward's do.

Before any of that, in the candidate's first step, one backward runs with
its own kernels switched off (the knockout): if its gradients still match
the reference's, PyTorch computed them. It runs on set 1, whose gradients no
candidate of the job has computed yet (each computes them in its second
step), so no freed buffer can hold them; not on set 0, whose right outputs
must not be made before every candidate's forward knockout.

The worker never sees the reference's gradients: it sends the candidate's,
with what the autograd graph and the launch switch showed, and the judge
decides (decide_backward.py).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from kernelevo.evaluate.child import guards
from kernelevo.evaluate.sandbox.redact import candidate_traceback
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.gradients import (KNOCKOUT_SET, REPEAT_SCALE, Backward,
                                                 NotDifferentiable, forward_backward)


class BackwardRuns:
    """One candidate's forward and backward calls, in the two steps of its forward checks."""

    def __init__(self, model: Any, task: Any, sets: list[tuple[int, Any]], device: str,
                 dtype: torch.dtype, switch: Any) -> None:
        self.model, self.task, self.sets = model, task, sets
        self.device, self.dtype, self.switch = device, dtype, switch
        self.knockout: list[torch.Tensor] | None = None
        self.launches = 0  # its own Triton launches during backward, with the kernels on
        self.problem: str | None = None  # not differentiable: no gradients at all
        self.error: str | None = None  # its backward raised
        # gradients of parameters take this much room (guards.poison_allocator)
        self.parameter_bytes = _parameter_bytes(model)

    def knockout_run(self) -> None:
        """The backward of one set with the candidate's own kernels switched off."""
        if len(self.sets) <= KNOCKOUT_SET:  # the oracle dropped the stress set: none to spare
            return
        try:
            self.knockout = self._call(KNOCKOUT_SET, kernels=False).gradients
        except Exception:  # noqa: BLE001 - failing without its kernels proves they matter
            self.knockout = None

    def finish(self) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        """Bundle entries (`grad_<set>`, `grad_repeat`, `grad_knockout`) and report fields."""
        bundle: dict[str, list[Any]] = {}
        first: Backward | None = None
        try:
            for number in range(len(self.sets)):
                result = self._call(number)
                first = first or result
                bundle[f"grad_{number}"] = result.gradients
                bundle[f"grad_out_{number}"] = [_plain(v) for v in result.outputs]
            repeat = self._call(0, scale=REPEAT_SCALE, record=True)
            bundle["grad_repeat"] = repeat.gradients
        except NotDifferentiable as exc:
            self.problem, bundle = str(exc), {}
        except Exception as exc:  # noqa: BLE001 - the judge names it once the forward is right
            self.error, bundle = candidate_traceback(exc), {}
        if bundle and self.knockout is not None:
            bundle["grad_knockout"] = self.knockout
        report: dict[str, Any] = {"backward_launches": self.launches,
                                  "backward_problem": self.problem,
                                  "backward_error": self.error}
        if bundle and first is not None:
            report.update(grad_names=tuple(first.names),
                          custom_functions=tuple(first.custom_functions),
                          grad_fns=tuple(first.grad_fns), backward_ops=repeat.ops,
                          grad_forward_ops=repeat.forward_ops)
        return bundle, report

    def _call(self, number: int, scale: float = 1.0, record: bool = False,
              kernels: bool = True) -> Backward:
        seed, variant = self.sets[number]
        inputs = task_inputs.kept_inputs(self.task, seed, self.device, self.dtype, variant)
        # poisoned room for the call's outputs and gradients (guards.poison_allocator)
        room = task_inputs.tensor_bytes(list(inputs)) + self.parameter_bytes
        guards.poison_allocator(self.device, 2 * room)
        result = forward_backward(self.model, inputs, seed, scale, record,
                                  around_backward=self._around(kernels))
        if self.device == "cuda":
            torch.cuda.synchronize()
        return result

    def _around(self, kernels: bool) -> Callable[[Callable[[], Any]], Any]:
        """The backward call, its launches counted, with the candidate's kernels on or off."""

        def around(backward: Callable[[], Any]) -> Any:
            before = self.switch.launches
            self.switch.set(kernels)
            try:
                result = backward()
                if self.device == "cuda":
                    torch.cuda.synchronize()  # kernels off must stay off until they have run
                return result
            finally:
                self.switch.set(True)
                self.launches += self.switch.launches - before

        return around


def _plain(value: Any) -> Any:
    """A plain tensor (what the judge compares), or a stand-in string (worker.py's rule)."""
    if isinstance(value, torch.Tensor):
        return value.as_subclass(torch.Tensor)
    return f"<{type(value).__name__}>"


def warm_autograd_threads(device: str) -> None:
    """Start autograd's device thread before the guards take their first look at threads.

    On a GPU, backward runs in a thread of autograd's engine, made at the first
    backward on the device; Python code run there registers it with
    `threading`, which would charge the first candidate with a thread that is
    the harness's own.
    """
    if device != "cuda":
        return

    class _Touch(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, value: torch.Tensor) -> torch.Tensor:
            return value.clone()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            threading.current_thread()  # registers the engine's thread, as a candidate's would
            return grad

    value = torch.ones(1, device=device, requires_grad=True)
    _Touch.apply(value).sum().backward()
    torch.cuda.synchronize()


def _parameter_bytes(model: Any) -> int:
    """The bytes of a model's parameters (0 if it has none it will tell of)."""
    try:
        return sum(p.numel() * p.element_size() for p in torch.nn.Module.parameters(model)
                   if isinstance(p, torch.Tensor))
    except Exception:  # noqa: BLE001 - not a module: room for the inputs only
        return 0
