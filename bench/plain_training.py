"""A task's training step timed in a plain process: the control for the judge's `train_*` speedups.

    python3 bench/plain_training.py TASK.py CANDIDATE.py [--calls 500]

The training counterpart of ../shared/tools/plain_timing.py: nothing else runs
in this process, PyTorch's default settings, no sandbox, no hooks. Three
contestants, each built with the same seed: the task's Model (eager),
torch.compile's baseline as the judge times it (`compile`: the Model called
on the timed inputs and on 3 more fixed sets inside one compiled model,
its backward through AOTAutograd, compiled in the warm-up; every figure
divided by its 4 calls), and the candidate's ModelNew; `compile_alone`,
torch.compile of the Model by itself (dynamo's entry paid on every step),
is reported beside them. One training step is what the
judge times: a forward with grad, then `torch.autograd.grad` of the outputs,
weighted by a fixed random projection, with respect to every floating input
and every parameter (nothing accumulates in `.grad`). Per contestant:

  train_loop_ms     host time per step of back-to-back steps after 20 warm-up
                    steps, synchronised once at the end;
  train_do_bench_ms triton.testing.do_bench of one step (L2 flushed; device time,
                    the host's gaps between the step's launches included);
  train_kernel_ms   the summed device time of every kernel of one step (torch.profiler;
                    no gaps: what the judge's `gpu` measure holds the GPU to time);
  forward_loop_ms   the forward with grad alone, the same way;
  backward_loop_ms  train_loop_ms - forward_loop_ms (the judge's `train-forward`);
  backward_replay_loop_ms  the backward alone, `torch.autograd.grad` with
                    retain_graph=True replayed on one forward's graph, the way
                    the judge times `backward_call` (none for a contestant whose
                    graph refuses a second backward, as torch.compile's does).

Prints one JSON line: every figure, and each speedup of the candidate over
eager and over compile. Run it as its own process in the same device call as
the judge it checks.

`--pin CORE --autograd beside|apart` is not the control but an experiment
on it: the timed thread pinned to CORE as the judge pins its timing, and
autograd's device threads (where a backward on a GPU runs) pinned to the
same core, as the judge pins them (`beside`), or to another (`apart`). It
tells whether the judge's host-bound training steps read faster than a
plain process's (session 28: the step 0.203 ms against 0.245-0.281, the
backward alone 0.126 against 0.201, the forward the same) because a
backward handed to a thread on the same core wakes sooner than one on
another core.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from typing import Any, Callable

import torch


def load(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outputs_of(value: Any) -> list[torch.Tensor]:
    values = value if isinstance(value, (tuple, list)) else [value]
    return [v for v in values if torch.is_tensor(v) and v.requires_grad]


def _graph_of(module: torch.nn.Module, call: Callable[..., Any], inputs: list[Any],
              seed: int) -> tuple[list[Any], list[torch.Tensor], list[torch.Tensor],
                                  list[torch.Tensor]]:
    """(leaves, tensors whose gradients are wanted, one forward's outputs, their projection)."""
    leaves = [x.detach().requires_grad_(True) if torch.is_tensor(x) and x.is_floating_point()
              else x for x in inputs]
    wanted = [x for x in leaves if torch.is_tensor(x) and x.requires_grad]
    wanted += [p for p in module.parameters() if p.requires_grad]
    outputs = outputs_of(call(*leaves))
    generator = torch.Generator(device=outputs[0].device).manual_seed(seed)
    projections = [torch.randn(o.shape, device=o.device, dtype=o.dtype, generator=generator)
                   for o in outputs]
    return leaves, wanted, outputs, projections


def step_of(module: torch.nn.Module, call: Callable[..., Any], inputs: list[Any],
            seed: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(one training step, the forward with grad alone) of `call` on `inputs`."""
    leaves, wanted, _, projections = _graph_of(module, call, inputs, seed)

    def train() -> Any:
        return torch.autograd.grad(outputs_of(call(*leaves)), wanted, projections,
                                   allow_unused=True)

    def forward() -> Any:
        return call(*leaves)

    return train, forward


def replay_of(module: torch.nn.Module, call: Callable[..., Any], inputs: list[Any],
              seed: int) -> Callable[[], Any]:
    """The backward alone, replayed on one forward's graph (step_of's leaves and projection)."""
    _, wanted, outputs, projections = _graph_of(module, call, inputs, seed)

    def backward() -> Any:
        return torch.autograd.grad(outputs, wanted, projections, retain_graph=True,
                                   allow_unused=True)

    return backward


IN_MODEL_CALLS = 4  # calls of the task in the compiled model, as the judge's baseline


class InModel(torch.nn.Module):
    """The task's model called on several input sets in one forward: one part of a model."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *sets: list[Any]) -> tuple[Any, ...]:
        return tuple(self.model(*inputs) for inputs in sets)


def in_a_model(model: torch.nn.Module, extra: list[list[Any]]) -> Callable[..., Any]:
    """torch.compile of `model` inside a model that also calls it on `extra` (leaves with grad)."""
    compiled = torch.compile(InModel(model))
    leaves = [[x.detach().requires_grad_(True) if torch.is_tensor(x) and x.is_floating_point()
               else x for x in inputs] for inputs in extra]

    def call(*inputs: Any) -> tuple[Any, ...]:
        return compiled(list(inputs), *leaves)

    return call


def autograd_threads() -> list[int]:
    """Native ids of this process's autograd device threads (torch names them pt_autograd_N).

    As the judge finds them (kernelevo's `cores.autograd_threads`), written here
    again: the control imports nothing of the project it checks."""
    found = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                if comm.read().startswith("pt_autograd"):
                    found.append(int(tid))
        except OSError:
            continue
    return found


def pin(core: int, autograd: str) -> dict[str, Any]:
    """This thread onto `core`, autograd's device threads beside it or on the next core."""
    os.sched_setaffinity(0, {core})
    other = core if autograd == "beside" else (core + 1) % (os.cpu_count() or 1)
    threads = autograd_threads()
    for thread in threads:
        os.sched_setaffinity(thread, {other})
    return {"pinned_core": core, "autograd": autograd, "autograd_core": other,
            "autograd_threads": len(threads)}


def loop_ms(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def kernel_ms(fn: Callable[[], Any], calls: int = 50) -> float:
    """Summed device time of every kernel of one call, by the profiler, in ms."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(event.device_time_total for event in prof.key_averages()) / 1000.0 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("candidate")
    parser.add_argument("--calls", type=int, default=500, help="timed steps per loop")
    parser.add_argument("--pin", type=int, default=None,
                        help="an experiment, not the control: the timed thread on this core")
    parser.add_argument("--autograd", choices=("beside", "apart"), default="beside",
                        help="with --pin: autograd's device threads on the same core or another")
    args = parser.parse_args()
    import triton.testing

    task, candidate = load(args.task, "task"), load(args.candidate, "candidate")
    init = task.get_init_inputs()
    torch.manual_seed(0)
    reference = task.Model(*init).cuda()
    torch.manual_seed(0)
    new = candidate.ModelNew(*init).cuda()
    torch.manual_seed(1)
    inputs = [x.cuda() if torch.is_tensor(x) else x for x in task.get_inputs()]
    extra = []
    for seed in range(2, 1 + IN_MODEL_CALLS):
        torch.manual_seed(seed)
        extra.append([x.cuda() if torch.is_tensor(x) else x for x in task.get_inputs()])
    contestants = {"eager": (reference, reference),
                   "compile": (reference, in_a_model(reference, extra)),
                   "compile_alone": (reference, torch.compile(reference)),
                   "candidate": (new, new)}
    calls_of = {"compile": IN_MODEL_CALLS}  # task calls per step: figures are per call
    row: dict[str, Any] = {"task": args.task, "candidate": args.candidate,
                           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    steps = {name: step_of(module, call, inputs, seed=2)
             for name, (module, call) in contestants.items()}
    if args.pin is not None:  # autograd's device threads exist once a backward has run
        steps["eager"][0]()
        torch.cuda.synchronize()
        row.update(pin(args.pin, args.autograd))
    for name, (train, forward) in steps.items():
        row[f"train_loop_ms_{name}"] = loop_ms(train, args.calls)
        row[f"forward_loop_ms_{name}"] = loop_ms(forward, args.calls)
        row[f"backward_loop_ms_{name}"] = (row[f"train_loop_ms_{name}"]
                                           - row[f"forward_loop_ms_{name}"])
    for name, (module, call) in contestants.items():
        try:
            backward = replay_of(module, call, inputs, seed=2)
            backward()
            backward()  # a graph that refuses a second backward says so here
        except RuntimeError:
            row[f"backward_replay_loop_ms_{name}"] = None
            continue
        row[f"backward_replay_loop_ms_{name}"] = loop_ms(backward, args.calls)
    for name, (train, _) in steps.items():
        row[f"train_do_bench_ms_{name}"] = triton.testing.do_bench(train, warmup=50, rep=300)
    for name, (train, _) in steps.items():  # last: nothing timed runs under the profiler
        row[f"train_kernel_ms_{name}"] = kernel_ms(train)
    for name, calls in calls_of.items():
        for key, value in list(row.items()):
            if key.endswith(f"_ms_{name}") and value is not None:
                row[key] = value / calls
    for figure in ("train_loop_ms", "train_do_bench_ms", "train_kernel_ms",
                   "backward_loop_ms", "backward_replay_loop_ms"):
        for baseline in ("eager", "compile", "compile_alone"):
            if row[f"{figure}_{baseline}"] is None or row[f"{figure}_candidate"] is None:
                continue  # a graph that cannot be replayed has no replay figure
            row[f"{figure[:-3]}_speedup_vs_{baseline}"] = (row[f"{figure}_{baseline}"]
                                                          / row[f"{figure}_candidate"])
    print(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in row.items()}),
          flush=True)


if __name__ == "__main__":
    main()
