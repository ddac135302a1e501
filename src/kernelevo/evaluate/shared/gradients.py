"""The backward pass of a task, as the oracle and the worker both run it.

A task that asks for the backward (`backward = True` in its file, or
`[eval] backward`, `--backward`) is judged on its gradients too. The loss is
a fixed random projection of the outputs, `loss = sum(out * proj)` over the
floating outputs, with `proj` drawn from the input set's own seed: fresh for
every input set and every evaluation, so neither a constant gradient nor one
cached from an earlier call can pass. Its gradient with respect to each output
is `proj` itself, so it is handed to autograd as the outputs' gradient, and
no multiplication or sum of the harness's own shows in the backward's ops.

Gradients are taken of every floating input and every parameter that
requires grad. The oracle and the worker make the same projections from the
same seeds: no tensor crosses between them, and the reference's gradients
stay in the oracle's and the judge's processes.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from kernelevo.config import EvalConfig
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.oplog import record_ops
from kernelevo.task import Task

# Mixed into an input set's seed for its projection: the inputs and the
# projection must not come from one stream of random numbers.
_PROJECTION_SALT = 0x6A09E667F3BCC908
_SEED_MASK = (1 << 63) - 1
# The repeated call on input set 0 uses the projection scaled by this: its
# gradients are the first call's times this, exactly (a power of two scales
# every rounding alike), and a candidate that hands back the first call's
# gradients fails it.
REPEAT_SCALE = -2.0
# The input set whose backward runs with the candidate's kernels off (worker_backward.py).
KNOCKOUT_SET = 1
# How deep the search of an output's autograd graph for a custom Function goes.
_GRAPH_NODES_MAX = 10_000


def backward_on(task: Task, config: EvalConfig) -> bool:
    """Whether gradients are judged: the task's file asks for it, or the run's settings do."""
    return config.backward or task.asks_backward


def projections(seed: int, outputs: list[Any], scale: float = 1.0) -> list[torch.Tensor | None]:
    """The projection of each output (None for outputs that are not floating tensors)."""
    found: list[torch.Tensor | None] = []
    generator: torch.Generator | None = None
    for value in outputs:
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            found.append(None)
            continue
        if generator is None:
            generator = torch.Generator(device=value.device)
            generator.manual_seed((seed ^ _PROJECTION_SALT) & _SEED_MASK)
        drawn = torch.randn(value.shape, generator=generator, device=value.device,
                            dtype=torch.float32)
        found.append((drawn * scale).to(value.dtype))
    return found


def grad_inputs(inputs: list[Any]) -> tuple[list[Any], list[int]]:
    """Fresh copies of the inputs, floating ones requiring grad; and their positions."""
    given, positions = [], []
    for position, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            value = value.detach().clone()
            if value.is_floating_point():
                value.requires_grad_(True)
                positions.append(position)
        given.append(value)
    return given, positions


def parameters_of(model: Any) -> list[tuple[str, torch.Tensor]]:
    """The model's parameters that require grad, by name."""
    if not hasattr(model, "named_parameters"):
        return []
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def gradient_names(positions: list[int], parameters: list[tuple[str, Any]],
                   arguments: list[str] | None = None) -> list[str]:
    """How gradients are named in verdicts: `input 0 (x)`, `parameter ln.weight`.

    `arguments` are forward's parameter names, where known; an input's
    position is what pairs it with the reference's (`gradient_key`).
    """
    arguments = arguments or []
    inputs = [f"input {p} ({arguments[p]})" if p < len(arguments) else f"input {p}"
              for p in positions]
    return inputs + [f"parameter {name}" for name, _ in parameters]


def gradient_key(name: str) -> str:
    """What pairs a candidate's gradient with the reference's: `input 0`, `parameter w`."""
    return name.split(" (", 1)[0] if name.startswith("input ") else name


def _arguments(model: Any) -> list[str]:
    """Names of forward's positional parameters, or [] where they cannot be read."""
    try:
        signature = inspect.signature(model.forward)
    except (AttributeError, TypeError, ValueError):
        return []
    return [name for name, p in signature.parameters.items()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


@dataclass
class Backward:
    """One forward and backward call: outputs, gradients, their names and what the graph showed."""

    outputs: list[Any]  # forward's outputs under grad, detached (what training computes with)
    gradients: list[torch.Tensor]
    names: list[str]
    custom_functions: list[str]  # custom autograd.Function nodes in the outputs' graph
    grad_fns: list[str]  # the outputs' own gradient functions, by class name
    # PyTorch compute ops dispatched during forward (under grad) and backward, when recorded
    forward_ops: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()


class NotDifferentiable(Exception):
    """No floating output of the call carries a gradient function."""


def forward_backward(model: Any, inputs: list[Any], seed: int, scale: float = 1.0,
                     record: bool = False,
                     around_backward: Callable[[Callable[[], Any]], Any] | None = None
                     ) -> Backward:
    """Run forward with grad on copies of `inputs`, then backward of the projected loss.

    `record`: both under the operator log. `around_backward`, when given,
    runs the backward call (the worker counts launches and switches kernels
    around it). A gradient autograd leaves undefined (an input the outputs do
    not depend on) is zeros.
    """
    given, positions = grad_inputs(inputs)
    parameters = parameters_of(model)
    forward_ops: set[str] = set()
    with torch.enable_grad():
        output = _recorded(lambda: model(*given), forward_ops) if record else model(*given)
    values, _ = task_inputs.flatten_outputs(output)
    floating = [(v, p) for v, p in zip(values, projections(seed, values, scale))
                if p is not None and isinstance(v, torch.Tensor) and v.grad_fn is not None]
    if not floating:
        raise NotDifferentiable(_no_graph(values))
    wanted = [given[p] for p in positions] + [p for _, p in parameters]

    def backward() -> Any:
        return torch.autograd.grad([v for v, _ in floating], wanted,
                                   grad_outputs=[p for _, p in floating], allow_unused=True)

    ops: set[str] = set()
    call = (lambda: _recorded(backward, ops)) if record else backward
    grads = around_backward(call) if around_backward is not None else call()
    gradients = [torch.zeros_like(w) if g is None else g.detach().clone()
                 for g, w in zip(grads, wanted)]
    return Backward([v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values],
                    gradients, gradient_names(positions, parameters, _arguments(model)),
                    custom_function_nodes([v for v, _ in floating]),
                    [type(v.grad_fn).__name__ for v, _ in floating],
                    forward_ops=tuple(sorted(forward_ops)), ops=tuple(sorted(ops)))


def _recorded(call: Callable[[], Any], into: set[str]) -> Any:
    result, recorded, _ = record_ops(call)
    into.update(recorded)
    return result


def _no_graph(values: list[Any]) -> str:
    floating = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]
    if not floating:
        return "no output is a floating tensor: there is nothing to differentiate"
    return ("no floating output carries a gradient function (grad_fn is None): the output "
            "was computed outside autograd; wrap the kernels in a torch.autograd.Function "
            "whose backward launches your own kernels")


def custom_function_nodes(outputs: list[torch.Tensor]) -> list[str]:
    """Names of the custom autograd.Function nodes reachable from the outputs' grad_fn.

    A node of a custom Function (or of a custom op's registered autograd) is a
    `BackwardCFunction`; PyTorch's own derivatives (`NativeLayerNormBackward0`)
    are not. Searched breadth first, up to a bound.
    """
    found: list[str] = []
    seen: set[int] = set()
    queue = [v.grad_fn for v in outputs if v.grad_fn is not None]
    while queue and len(seen) < _GRAPH_NODES_MAX:
        node = queue.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            name = type(node).__name__
            if name not in found:
                found.append(name)
        queue.extend(child for child, _ in getattr(node, "next_functions", ()))
    return found
