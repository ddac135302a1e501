"""Put kernels back into a model: each swapped submodule runs its kernel as a custom op.

`apply(model, kernels)` reads the extracted folder's manifest.json, finds one
kernel file per task in `kernels` (`<task>.py`, or one `<task>__<any>.py`),
builds its ModelNew, gives it the original submodule's own weights (shared,
never drawn anew), checks it against the original at the recorded input
shapes in the model's dtype and device, and swaps the instance's forward for
the custom op (swap.py). Only checked signatures run the kernel while the
guard is on. The model's class, state_dict keys and hooks stay as they were.
A training task's kernel (`backward = True`) is checked on its gradients too,
and its own backward is the one training runs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from kernelevo.config import tolerances
from kernelevo.errors import CandidateError, EnvironmentProblem
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.model.extract import draw_input, read_manifest, spec_from_dict
from kernelevo.model.profile import InputSpec
from kernelevo.model.swap import Swap, gradients, module_tensors, patched_forward, register, \
    signature
from kernelevo.task import declares_backward


@dataclass(frozen=True)
class Swapped:
    """A submodule now running a kernel."""

    path: str
    task: str
    kernel_file: str
    verified: tuple[tuple[tuple[int, ...], ...], ...]  # input shapes checked, per signature
    max_abs_error: float
    slot: int = -1  # the custom op's `slot` argument for this submodule
    training: bool = False  # a training task's kernel: its own backward runs


@dataclass(frozen=True)
class Skipped:
    """A submodule (or a task) left as it was, and why."""

    path: str
    task: str
    reason: str


@dataclass
class Applied:
    """What apply() did to a model; restore() undoes it."""

    model: torch.nn.Module
    swapped: list[Swapped] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def restore(self) -> None:
        """Every swapped submodule back to its own forward."""
        for item in self.swapped:
            self.model.get_submodule(item.path).__dict__.pop("forward", None)
        self.swapped.clear()

    def to_dict(self) -> dict[str, Any]:
        return {"swapped": [vars(s) for s in self.swapped],
                "skipped": [vars(s) for s in self.skipped]}


def apply(model: torch.nn.Module, kernels: str | os.PathLike[str], *,
          tasks: str | os.PathLike[str] | None = None, guard: bool = True,
          shapes: dict[str, list[tuple[tuple[int, ...], ...]]] | None = None) -> Applied:
    """Swap each extracted submodule of `model` for its kernel, in place.

    `tasks` is the folder `kernelevo model extract` wrote (default: `kernels`).
    `shapes` maps a path or task name to more input shapes to check, so the
    guard lets the kernel run there too; `guard=False` runs it at any shape.
    """
    kernels_dir = Path(kernels).resolve()
    tasks_dir = Path(tasks).resolve() if tasks is not None else kernels_dir
    manifest = read_manifest(tasks_dir)
    applied = Applied(model)
    for folder in (tasks_dir, kernels_dir):  # kernels import the model's copy beside the tasks
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    device, dtype = _placement(model)
    for entry in manifest["tasks"]:
        entry = {**entry, "backward": is_training_task(entry, tasks_dir)}
        kernel_file = find_kernel(kernels_dir, tasks_dir, entry["name"])
        if kernel_file is None:
            applied.skipped.extend(Skipped(p, entry["name"], "no kernel file")
                                   for p in entry["paths"])
            continue
        kernel_class = load_kernel_class(kernel_file, device)
        specs = [spec_from_dict(s) for s in entry["inputs"]]
        extra = (shapes or {}).get(entry["name"], [])
        for path in entry["paths"]:
            more = extra + (shapes or {}).get(path, [])
            _swap_one(applied, entry, path, kernel_class, kernel_file, specs, more, guard,
                      device, dtype)
    return applied


def _swap_one(applied: Applied, entry: dict[str, Any], path: str, kernel_class: type,
              kernel_file: Path, specs: list[InputSpec],
              more_shapes: list[tuple[tuple[int, ...], ...]], guard: bool, device: Any,
              dtype: Any) -> None:
    model, name = applied.model, entry["name"]
    problem = _mismatch(model, path, entry)
    if problem:
        applied.skipped.append(Skipped(path, name, problem))
        return
    original = model.get_submodule(path)
    kernel = kernel_class().to(device=device, dtype=dtype)
    kernel_names = match_weights(original, kernel, kernel_file)
    share_weights(original, kernel, kernel_names)
    swap = Swap(path, original, kernel, tuple(n for n, _ in module_tensors(original)),
                kernel_names, guard=guard, training=bool(entry.get("backward")))
    worst = 0.0
    for shape_set in [tuple(s.shape for s in specs), *more_shapes]:
        error, problem = check_swap(swap, specs, shape_set, device, dtype)
        if problem:
            applied.skipped.append(Skipped(path, name, f"kernel {kernel_file.name} is wrong at "
                                           f"inputs {shape_set}: {problem}"))
            return
        worst = max(worst, error)
    slot = register(swap)
    original.forward = patched_forward(original, slot, len(specs))
    verified = tuple(tuple(shape for shape, _, _ in sig) for sig in sorted(swap.verified))
    applied.swapped.append(Swapped(path, name, str(kernel_file), verified, worst, slot,
                                   swap.training))


def is_training_task(entry: dict[str, Any], tasks_dir: Path) -> bool:
    """Whether the manifest, or the task file itself (edited since), asks for the backward."""
    task_file = tasks_dir / entry.get("file", f"{entry['name']}.py")
    return bool(entry.get("backward")) or (task_file.is_file()
                                           and declares_backward(task_file.read_text()))


def _placement(model: torch.nn.Module) -> tuple[Any, Any]:
    first = next(iter(model.parameters()), None)
    if first is None:
        return torch.device("cpu"), torch.float32
    return first.device, first.dtype


def _mismatch(model: torch.nn.Module, path: str, entry: dict[str, Any]) -> str:
    """Why the model's submodule at `path` is not the one the task was made from ("" if it is)."""
    try:
        sub = model.get_submodule(path)
    except AttributeError:
        return f"the model has no submodule {path!r}"
    if type(sub).__name__ != entry["type"]:
        return f"{path} is a {type(sub).__name__}, the task was made from a {entry['type']}"
    shapes = [[n, list(t.shape)] for n, t in module_tensors(sub)]
    if shapes != entry["params"]:
        return f"{path}'s weights have shapes {shapes}, the task's {entry['params']}"
    if "forward" in sub.__dict__:
        return f"{path} is already swapped (or its forward is set on the instance)"
    return ""


def find_kernel(kernels_dir: Path, tasks_dir: Path, name: str) -> Path | None:
    """`<name>.py` (unless that is the task itself) or the one `<name>__*.py`."""
    exact = kernels_dir / f"{name}.py"
    if exact.is_file() and kernels_dir != tasks_dir:
        return exact
    others = sorted(kernels_dir.glob(f"{name}__*.py"))
    if len(others) > 1:
        raise CandidateError(f"several kernels for task {name}: {[p.name for p in others]}; "
                             f"keep one, or name the one to use {name}.py")
    return others[0] if others else None


def load_kernel_class(path: Path, device: Any) -> type:
    """ModelNew from a kernel file; Triton kernels load under the interpreter without a GPU."""
    if torch.device(device).type == "cpu" and "triton" in path.read_text():
        interpret_triton(path)
    try:
        spec = importlib.util.spec_from_file_location(f"_kernelevo_kernel_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        raise CandidateError(f"kernel {path} failed to import: {type(exc).__name__}: "
                             f"{exc}") from exc
    if not hasattr(module, "ModelNew"):
        raise CandidateError(f"kernel {path} defines no ModelNew: a kernel file is a "
                             "KernelBench candidate (class ModelNew(nn.Module))")
    return module.ModelNew


def interpret_triton(path: Path) -> None:
    """Run this process's Triton kernels under the interpreter (no GPU).

    Read at import (@triton.jit, triton.language's builtins) and again on a
    first launch, so it stays set; Triton imported before it was set cannot
    interpret (its tl.exp and the like refuse to run outside a kernel).
    """
    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    if "triton" in sys.modules:
        raise EnvironmentProblem(
            f"kernel {path.name}: Triton was imported in this process before "
            "TRITON_INTERPRET=1 was set, so its kernels cannot run without a GPU: set "
            "TRITON_INTERPRET=1 before anything imports triton")
    os.environ["TRITON_INTERPRET"] = "1"


def match_weights(original: torch.nn.Module, kernel: torch.nn.Module,
                  where: Path) -> tuple[str | None, ...]:
    """For each of the original's tensors, the kernel's name for it (None: the kernel has none).

    By name (`weight`, or the task's `inner.weight`), else by the order and
    shapes of the parameters.
    """
    theirs = dict(module_tensors(original))
    mine = dict(module_tensors(kernel))
    found: dict[str, str] = {}
    for name, tensor in mine.items():
        for candidate in (name, name.removeprefix("inner.")):
            if candidate in theirs and theirs[candidate].shape == tensor.shape:
                found[candidate] = name
                break
    kernel_params = [n for n, _ in kernel.named_parameters()]
    if not set(kernel_params) <= set(found.values()):
        found = _by_order(original, kernel, where)
    return tuple(found.get(name) for name in theirs)


def _by_order(original: torch.nn.Module, kernel: torch.nn.Module, where: Path) -> dict[str, str]:
    theirs = list(original.named_parameters())
    mine = list(kernel.named_parameters())
    if [t.shape for _, t in theirs] != [t.shape for _, t in mine]:
        raise CandidateError(
            f"kernel {where.name}: its parameters {[(n, tuple(t.shape)) for n, t in mine]} "
            f"match neither the names nor the shapes of the original's "
            f"{[(n, tuple(t.shape)) for n, t in theirs]}: name them as the reference does "
            "(`weight` or `inner.weight`) so the model's own weights can be used")
    return {a: b for (a, _), (b, _) in zip(theirs, mine)}


def share_weights(original: torch.nn.Module, kernel: torch.nn.Module,
                  kernel_names: tuple[str | None, ...]) -> None:
    """The kernel holds the original's own tensors: one copy, and training updates both."""
    for (_, tensor), name in zip(module_tensors(original), kernel_names):
        if name is None:
            continue
        owner_path, _, leaf = name.rpartition(".")
        owner = kernel.get_submodule(owner_path)
        if leaf in owner._parameters:
            owner._parameters[leaf] = tensor if isinstance(tensor, torch.nn.Parameter) \
                else torch.nn.Parameter(tensor, requires_grad=False)
        else:
            owner._buffers[leaf] = tensor


def check_swap(swap: Swap, specs: list[InputSpec], shapes: tuple[tuple[int, ...], ...],
               device: Any, dtype: Any) -> tuple[float, str]:
    """(max abs error, problem) of the kernel against the original at `shapes`; marks verified."""
    from kernelevo.model.swap import kernel_forward, original_forward

    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(len(swap.verified) + 1)
        inputs = [draw_input(s, dtype, device, shape) for s, shape in zip(specs, shapes)]
        weights = [t for _, t in module_tensors(swap.original)]
        expected = original_forward(swap, inputs, weights)
        try:
            got = kernel_forward(swap, inputs, weights)
        except Exception as exc:
            return 0.0, f"it raised {type(exc).__name__}: {exc}"
    atol, rtol = tolerances(str(expected.dtype).removeprefix("torch."))
    verdict = compare_tensor(got, expected, atol, rtol)
    if verdict.reason:
        return 0.0, verdict.message
    if swap.training:
        problem = _gradient_problem(swap, inputs, weights, expected, atol, rtol)
        if problem:
            return 0.0, problem
    swap.verified.add(signature(inputs))
    return (verdict.metrics.max_abs_error if verdict.metrics else 0.0), ""


def _gradient_problem(swap: Swap, inputs: list[Any], weights: list[Any], output: Any,
                      atol: float, rtol: float) -> str:
    """Why the kernel's gradients differ from the original's for a random output gradient."""
    grad = torch.randn_like(output)
    expected = gradients(swap, inputs, weights, grad, through_kernel=False)
    try:
        got = gradients(swap, inputs, weights, grad, through_kernel=True)
    except Exception as exc:
        return f"its backward raised {type(exc).__name__}: {exc}"
    floating = [f"input {i}" for i, x in enumerate(inputs) if x.is_floating_point()]
    floating += [n for n, w in zip(swap.names, weights) if w.is_floating_point()]
    for label, mine, theirs in zip(floating, got, expected):
        verdict = compare_tensor(mine, theirs, atol, rtol, label=f"the gradient of {label}")
        if verdict.reason:
            return verdict.message
    return ""


@contextmanager
def originals(applied: Applied) -> Iterator[None]:
    """Within the block, the swapped submodules run their own forwards."""
    saved = {s.path: applied.model.get_submodule(s.path).__dict__.pop("forward")
             for s in applied.swapped}
    try:
        yield
    finally:
        for path, forward in saved.items():
            applied.model.get_submodule(path).forward = forward

