"""Timing of a training step and of the backward alone, for a task whose backward is judged.

Two workloads per contestant (candidate, eager, torch.compile), each timed by
the forward's rules and loops (timing.py: interleaved rounds, the gpu and call
measures, the median and IQR, rotating input sets, only the task's own sets
counted):

- train: one forward with grad and the backward of the projected loss
  (gradients.py), the gradients of every floating input and every parameter;
- backward: the backward alone, replayed with `retain_graph=True` on one
  forward's graph per input set, made outside the timed region.

The projection of each set is drawn from its seed before timing starts, and
handed to autograd as the outputs' gradient, so the timed calls hold no loss
of the harness's own. Gradients are taken with `torch.autograd.grad`, which
returns them instead of adding them to `.grad`: nothing accumulates between
calls, and `.grad` is cleared before timing. A contestant whose graph refuses
a second backward is timed by a forward with grad beside its train call, in
the same rounds, and its backward is the difference of each round's two
times (`train-forward`), which a note says.

torch.compile's contestant is the baseline's compiled model of several calls
(`CompiledInAModel`), its other input sets requiring grad as the timed one
does: its forward and backward are AOTAutograd's compiled graphs. Its first
call with grad compiles them, in the warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, ContextManager, Sequence

import torch

from kernelevo.config import TimingConfig
from kernelevo.evaluate.analysis.oom import is_out_of_memory
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child import guards
from kernelevo.evaluate.child.baselines import CompiledInAModel
from kernelevo.evaluate.child.launch_check import LaunchCount, skipped_work
from kernelevo.evaluate.child.timing import Quiet, TimingRun, summarize, time_contestants
from kernelevo.evaluate.shared.gradients import (NotDifferentiable, grad_inputs, parameters_of,
                                                 projections)
from kernelevo.evaluate.verdict import workload_measure

TRAIN, BACKWARD = "train", "backward"
# Suffix of the forward-with-grad call timed beside a contestant whose graph cannot be replayed.
_FORWARD = "/forward"
# Method of backward stats taken as train minus forward with grad.
DIFFERENCE_METHOD = "train-forward"


@dataclass
class _Step:
    """One contestant on one input set: leaves requiring grad, the projections, a graph."""

    leaves: list[Any]  # the arguments of forward, floating tensors requiring grad
    wanted: list[torch.Tensor]  # what gradients are taken of: inputs, then parameters
    picked: list[int]  # positions of the outputs that carry a graph
    projections: list[torch.Tensor]  # the loss's gradient for each picked output
    outputs: list[torch.Tensor] | None = None  # a forward's outputs, kept for replays
    gradients: list[torch.Tensor | None] | None = None  # the first backward's, to check timed ones


class _Trainer:
    """A contestant's training calls; `load(i)` makes set i's step current."""

    def __init__(self, fn: Any, steps: list[_Step]) -> None:
        self.fn, self.steps, self.step = fn, steps, steps[0]
        self.calls_per_invocation = getattr(fn, "calls_per_invocation", 1)

    def load(self, set_index: int) -> None:
        self.step = self.steps[set_index]

    def forward(self) -> list[torch.Tensor]:
        values = flat(self.fn(*self.step.leaves))
        return [values[i] for i in self.step.picked]

    def train(self) -> tuple[torch.Tensor | None, ...]:
        step = self.step
        values = flat(self.fn(*step.leaves))
        return torch.autograd.grad([values[i] for i in step.picked], step.wanted,
                                   grad_outputs=step.projections, allow_unused=True)

    def backward(self) -> tuple[torch.Tensor | None, ...]:
        step = self.step
        assert step.outputs is not None  # made by _replayable before any backward is timed
        return torch.autograd.grad(step.outputs, step.wanted, grad_outputs=step.projections,
                                   retain_graph=True, allow_unused=True)


def flat(output: Any) -> list[Any]:
    """Outputs as one flat list: the compiled model's calls nest each call's outputs."""
    if isinstance(output, (tuple, list)):
        return [value for item in output for value in flat(item)]
    return [output]


def _module(fn: Any) -> Any:
    """Where a contestant's parameters are: the compiled model's own module, or itself."""
    return fn.compiled if isinstance(fn, CompiledInAModel) else fn


def _trainable(fn: Any) -> tuple[Any, list[torch.Tensor]]:
    """The contestant as trained, and the leaves of its own that also take gradients.

    The compiled model's other calls get inputs requiring grad, as the timed
    call's: each call of the task in it then does the same work.
    """
    if not isinstance(fn, CompiledInAModel):
        return fn, []
    extra = [grad_inputs(values)[0] for values in fn.extra]
    leaves = [v for values in extra for v in values
              if isinstance(v, torch.Tensor) and v.requires_grad]
    return CompiledInAModel(fn.compiled, extra), leaves


def _steps(fn: Any, sets: list[list[Any]], seeds: Sequence[int],
           candidate: bool = False) -> tuple[Any, list[_Step]]:
    """One step per input set, its projections drawn from the set's seed; outside any timing."""
    trained, extra = _trainable(fn)
    parameters = [p for _, p in parameters_of(_module(fn))]
    for parameter in parameters:
        parameter.grad = None
    found = []
    for values, seed in zip(sets, seeds):
        leaves, positions = grad_inputs(values)
        wanted = [leaves[p] for p in positions] + extra + parameters
        with torch.enable_grad():
            outputs = flat(trained(*leaves))
        picked = [i for i, v in enumerate(outputs) if isinstance(v, torch.Tensor)
                  and v.is_floating_point() and v.grad_fn is not None]
        if not picked:
            raise NotDifferentiable("no floating output carries a gradient function")
        drawn = projections(seed, outputs)  # a floating output's is never None
        step = _Step(leaves, wanted, picked, [p for i in picked if (p := drawn[i]) is not None])
        # The first backward's gradients: what every timed one of this set must give again.
        gradients = torch.autograd.grad([outputs[i] for i in picked], wanted,
                                        grad_outputs=step.projections, allow_unused=True)
        step.gradients = _detached(gradients)
        if not candidate:
            _poison(gradients, "gpu")
        found.append(step)
    return trained, found


def _poison(output: Any, measure: str) -> None:
    """NaN into a baseline's results, and the allocator's free blocks after a loop of calls."""
    tensors = [v for v in flat(output) if isinstance(v, torch.Tensor) and v.is_floating_point()]
    with torch.no_grad():
        for value in tensors:
            value.detach().fill_(float("nan"))
    if measure == "call" and tensors:  # the loop's earlier results were freed unpoisoned
        guards.poison_allocator(tensors[0].device.type)


def _detached(gradients: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
    return [g.detach().clone() if g is not None else None for g in gradients]


def _replayable(trainer: _Trainer) -> str | None:
    """Make each set's graph and run its backward twice; why a replay fails, if it does."""
    for set_index in range(len(trainer.steps)):
        trainer.load(set_index)
        step = trainer.step
        try:
            with torch.enable_grad():
                step.outputs = trainer.forward()
            trainer.backward()
            trainer.backward()
        except Exception as exc:  # noqa: BLE001 - refused: timed by the difference instead
            if is_out_of_memory(exc):
                raise
            for other in trainer.steps:
                other.outputs = None
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return None


@dataclass
class BackwardTiming:
    """Stats of the train and backward measures, by measure and contestant, and what to know."""

    measures: dict[str, dict[str, Any]]
    rounds: dict[str, dict[str, dict[int, float]]]
    notes: list[str]
    flags: list[str]
    dropped: dict[str, str]  # contestant -> why its backward timing ended
    methods: dict[str, str]  # contestant -> how its backward alone was timed
    seconds: dict[str, float]


def time_backward(contestants: dict[str, Any], sets: list[list[Any]], seeds: Sequence[int],
                  config: TimingConfig, counted: Sequence[int] | None = None,
                  launches: LaunchCount | None = None,
                  tolerance: tuple[float, float] = (1e-4, 1e-4),
                  unhooked: Callable[[], ContextManager[Any]] | None = None,
                  quiet: Quiet | None = None) -> BackwardTiming:
    """The train and backward measures of every contestant on `sets` (seeded by `seeds`).

    A candidate's timed gradients are checked against its own first
    backward on the same set, at `tolerance` (atol, rtol); one that differs
    is dropped, with why. The gpu and call measures are taken (CUDA graphs
    and KernelBench's protocol are for the forward only).
    """
    config = replace(config, cuda_graph=False, measure="gpu" if config.measure == "kernelbench"
                     else config.measure)
    result = BackwardTiming({}, {}, [], [], {}, {}, {})
    trainers: dict[str, _Trainer] = {}
    for name, fn in contestants.items():
        try:
            trained, steps = _steps(fn, sets, seeds, name.startswith("candidate_"))
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot train is left out
            if is_out_of_memory(exc):
                raise
            problem = f"its training step raised {type(exc).__name__}: {exc}"[:300]
            if name.startswith("candidate_"):
                result.dropped[name] = problem
            else:
                result.notes.append(f"{name}: not timed in training, {problem}")
            continue
        trainers[name] = _Trainer(trained, steps)
    if not trainers:
        return result
    after = _checker(trainers, tolerance)
    train = _timed({n: t.train for n, t in trainers.items()}, trainers, sets, config, after,
                   counted, launches, unhooked, quiet)
    _collect(result, TRAIN, train)
    refused = {name: _replayable(trainer) for name, trainer in trainers.items()
               if name not in result.dropped}
    calls: dict[str, Callable[[], Any]] = {}
    for name, trainer in trainers.items():
        if name in result.dropped:
            continue
        if refused[name] is None:
            calls[name] = trainer.backward
            result.methods[name] = "replayed graph"
        else:
            calls[name], calls[name + _FORWARD] = trainer.train, trainer.forward
            result.methods[name] = DIFFERENCE_METHOD
            result.notes.append(f"{name}: its graph refuses a second backward ({refused[name]}); "
                                "its backward alone is train minus forward with grad, timed "
                                "in the same rounds")
    if calls:
        backward = _timed(calls, trainers, sets, config, after, counted, launches, unhooked,
                          quiet)
        for name in list(calls):
            if name.endswith(_FORWARD):
                _difference(backward, name.removesuffix(_FORWARD))
        _collect(result, BACKWARD, backward)
    for trainer in trainers.values():
        for step in trainer.steps:
            step.outputs = None  # the graphs' saved tensors go now, not with the worker
    return result


def _timed(calls: dict[str, Callable[[], Any]], trainers: dict[str, _Trainer],
           sets: list[list[Any]], config: TimingConfig, after: Any,
           counted: Sequence[int] | None, launches: LaunchCount | None,
           unhooked: Callable[[], ContextManager[Any]] | None = None,
           quiet: Quiet | None = None) -> TimingRun:
    """One interleaved timing of `calls`, each contestant's set loaded by its trainer."""
    for name, call in list(calls.items()):
        share = trainers[name.removesuffix(_FORWARD)].calls_per_invocation
        if share != 1:
            calls[name] = _Shared(call, share)

    def load(set_index: int) -> None:
        for trainer in trainers.values():
            trainer.load(set_index)

    with torch.enable_grad():
        return time_contestants(calls, [[] for _ in sets], config, after, counted, launches,
                                load=load, unhooked=unhooked, quiet=quiet)


class _Shared:
    """A call that runs the task `calls_per_invocation` times (the compiled model)."""

    def __init__(self, call: Callable[[], Any], share: int) -> None:
        self.call, self.calls_per_invocation = call, share

    def __call__(self) -> Any:
        return self.call()


def _difference(run: TimingRun, name: str) -> None:
    """`name`'s times become train minus forward with grad, round by round.

    A round whose difference is not above zero could not tell the backward
    from the two calls' own noise. Where that is half the rounds or more, the
    measure has no backward time for `name` (a note says so): a median of
    zero would read as a backward that costs nothing, and a speedup over it
    as zero or infinite. Fewer such rounds count as the smallest difference
    above zero seen, so no round's speedup divides by zero; they widen the
    interval, as they should.
    """
    forward = name + _FORWARD
    for measure, by_name in run.rounds.items():
        own, other = by_name.pop(name, {}), by_name.pop(forward, {})
        stats = run.measures.get(measure, {})
        stats.pop(forward, None)
        differences = {r: own[r] - other[r] for r in sorted(set(own) & set(other))}
        above = [value for value in differences.values() if value > 0]
        if name not in stats:
            continue
        if 2 * len(above) <= len(differences):
            del stats[name]  # its train time, never to be read as its backward's
            run.notes.append(
                f"{name}: train minus forward with grad was not above zero in "
                f"{len(differences) - len(above)} of {len(differences)} rounds of {measure} "
                f"time (the backward within the two calls' noise): no {measure} time for its "
                "backward alone")
            continue
        by_name[name] = {r: max(value, min(above)) for r, value in differences.items()}
        stats[name] = summarize(list(by_name[name].values()), DIFFERENCE_METHOD)
    run.dropped.pop(forward, None)


def _collect(result: BackwardTiming, workload: str, run: TimingRun) -> None:
    for measure, by_name in run.measures.items():
        named = workload_measure(workload, measure)
        result.measures[named] = {name: vars(stats) for name, stats in by_name.items()}
        result.rounds[named] = run.rounds.get(measure, {})
        result.seconds[named] = run.seconds.get(measure, 0.0)
    result.seconds[f"{workload}_warm"] = run.seconds.get("warm", 0.0)
    result.notes += [f"{workload}: {note}".replace(f"{_FORWARD}:", " (its forward with grad):")
                     for note in run.notes]
    result.flags += [f"{workload}_{flag}" for flag in run.flags]
    for name, problem in run.dropped.items():
        result.dropped.setdefault(name, f"{workload}: {problem}")
    for name in run.measures.get("gpu", {}):
        skipped = skipped_work(run.launches, name)
        if skipped and name.startswith("candidate_"):
            result.dropped.setdefault(name, f"{workload}: {skipped}")


def _checker(trainers: dict[str, _Trainer], tolerance: tuple[float, float]) -> Any:
    """The after-sample check: a candidate's gradients as its first backward's on that set."""

    def after(name: str, measure: str, set_index: int, output: Any) -> str | None:
        if not name.startswith("candidate_"):
            # a baseline's freed gradients must not be there for a candidate to find
            _poison(output, measure)
            return None
        if name.endswith(_FORWARD):
            return None
        expected = trainers[name].steps[set_index].gradients or []
        for position, (got, want) in enumerate(zip(output, expected)):
            if got is None or want is None:
                if got is not want:
                    return f"set {set_index} gradient {position} changed to or from none"
                continue
            outcome = compare_tensor(got.detach(), want, tolerance[0], tolerance[1],
                                     f"set {set_index} gradient {position} during timing")
            if outcome.reason:
                return outcome.message
        return None

    return after
