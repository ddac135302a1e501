"""The reference oracle: runs the task's Model in its own process.

It validates the task, computes the reference outputs for every input set,
checks that the reference is deterministic, records the operators it uses and
counts its bytes and FLOPs. Its outputs go to a file only the judge reads; the
candidate never shares a process with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from kernelevo.config import EvalConfig, tolerances
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child.checkpoint import gpu_checkpoint
from kernelevo.evaluate.child.oracle_backward import reference_backward
from kernelevo.evaluate.child.task_code import (ANY, BUILD, FORWARD, IMPORT, INIT_INPUTS, INPUTS,
                                                TaskProblem, TaskRaised, task_code)
from kernelevo.evaluate.sandbox.pipe import Channel
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.messages import (Gpu, OracleDone, OracleJob, Progress, Reference,
                                                Sender, TaskFailed)
from kernelevo.evaluate.shared.oplog import record_ops
from kernelevo.evaluate.shared.transfer import export_bundle

TASK_MODULE = "kernelevo_task"  # the task's copy in the scratch folder: kernelevo_task.py


def run_oracle(payload: dict[str, Any], channel: Channel) -> None:
    """Child entry point; reports `done` with metadata or `task_error`."""
    sender, job = Sender(channel), OracleJob.from_json(payload)
    try:
        with task_code(ANY):  # the steps below name their own; this catches the rest
            meta = _compute(job, sender)
    except TaskProblem as exc:
        sender.send(TaskFailed(str(exc)))
        return
    except TaskRaised as exc:  # the task's own code raised: told with its own lines
        copy = str(Path(job.scratch) / f"{TASK_MODULE}.py")
        sender.send(TaskFailed(exc.describe(copy, job.task_path or "the task")))
        return
    sender.send(meta)


def _compute(job: OracleJob, channel: Sender) -> OracleDone:
    device, dtype = job.device, getattr(torch, job.dtype)
    task_inputs.set_reference_precision()
    module = _load_task(job.task_source, Path(job.scratch), job.task_folder)
    if device == "cuda":  # the context runs no kernels: made before the gate's hold
        torch.cuda.init()
        torch.empty(1, device=device)
    channel.ask(Gpu())
    channel.send(Progress("reference"))
    with task_code(INIT_INPUTS):
        init_inputs = module.get_init_inputs()
    if not isinstance(init_inputs, (list, tuple)):
        raise TaskProblem(f"get_init_inputs() returned {type(init_inputs).__name__}; "
                          "it must return a list of constructor arguments")
    with task_code(BUILD):
        model = task_inputs.build_model(module.Model, list(init_inputs), device, dtype)
    channel.send(Progress("reference outputs"))
    outputs: list[list[torch.Tensor]] = []
    kept: list[int] = []
    used: list[float | None] = []
    stress: dict[str, str] = {}
    structure: str | None = None
    for index, (seed, variant) in enumerate(zip(job.seeds, job.variants)):
        if index:  # between sets a timing waiting for the GPU goes first (checkpoint.py)
            gpu_checkpoint(channel, device)
        result, structure_now, variant = _run_in_domain(model, module, job, seed, device,
                                                        dtype, variant, outputs)
        if structure is not None and structure_now != structure:
            raise TaskProblem(f"the reference returns {structure_now} for one input set and "
                              f"{structure} for another")
        structure = structure_now
        if result is None:
            continue  # no stress scale keeps the reference finite: drop that set
        if variant is None:
            _check_checkable(result)
        else:
            stress[str(len(outputs))] = task_inputs.describe_stress(
                task_inputs.kept_inputs(module, seed, device, dtype, variant), variant)
        outputs.append(result)
        kept.append(index)
        used.append(variant)
    passthrough = _inputs_returned(module, job, kept, used, outputs, device, dtype)
    gpu_checkpoint(channel, device)
    channel.send(Progress("reference determinism"))
    _check_deterministic(model, module, job, outputs[0], device, dtype)
    gpu_checkpoint(channel, device)
    channel.send(Progress("reference profile"))
    ops, flops = _profile(model, module, job.seeds[0], device, dtype)
    bundle: dict[str, list[torch.Tensor]] = {}
    backward: dict[str, Any] = {}
    if job.backward:
        gpu_checkpoint(channel, device)
        channel.send(Progress("reference gradients"))
        bundle, backward = reference_backward(model, module, [job.seeds[i] for i in kept], used,
                                              device, dtype, EvalConfig(atol=job.atol,
                                                                        rtol=job.rtol))
    channel.send(Progress("reference transfer"))
    bundle.update({f"set_{i}": values for i, values in enumerate(outputs)})
    # The judge copies the outputs while this process waits, then lets it exit.
    channel.ask(Reference(export_bundle(bundle, Path(job.scratch))))
    first_inputs = task_inputs.kept_inputs(module, job.seeds[0], device, dtype, job.variants[0])
    params = [p for p in model.parameters()] if hasattr(model, "parameters") else []
    return OracleDone(
        kept_sets=tuple(kept), variants_used=tuple(used), stress=stress,
        structure=str(structure), ops=tuple(sorted(ops)), flops=flops,
        bytes=task_inputs.tensor_bytes(first_inputs) + task_inputs.tensor_bytes(outputs[0])
        + task_inputs.tensor_bytes(params),
        output_dtypes=tuple(str(t.dtype).replace("torch.", "") for t in outputs[0]),
        passthrough=tuple(passthrough), atol=_float_attr(module, "output_atol"),
        rtol=_float_attr(module, "output_rtol"),
        # after every reference call, so buffers its forward updates are no longer constant
        constant_tensors=tuple(task_inputs.constant_tensors(model)),
        peak_bytes=task_inputs.peak_gpu_bytes(device), **backward)


def _run_in_domain(model: Any, module: Any, job: OracleJob, seed: int, device: str,
                   dtype: torch.dtype, variant: float | None, earlier: list[list[torch.Tensor]]
                   ) -> tuple[list[torch.Tensor] | None, str, float | None]:
    """A set's reference outputs; a stress set backs off to milder scales until it judges fairly.

    The stress set must stay in the task's domain: where the reference itself
    overflows at the drawn scale (exp, cumprod), a milder scale is used. So
    it is where the reference's own answer is not sure at that scale: where
    it differs from the same reference in float64 by more than a quarter of
    the tolerance (attention's logits at scale 117 reach about 1e6, their
    float32 rounding moves the softmax's winner and an honest kernel's
    answer by 36), no kernel could be held to it.
    """
    scales = [variant] if variant is None else [variant, variant ** 0.5, 2.0]
    for scale in scales:
        result, structure = _run_set(model, module, seed, device, dtype, scale)
        if scale is None or (earlier and not _all_finite(earlier[0])):
            return result, structure, scale
        if _all_finite(result) and _sure(model, module, job, seed, device, dtype, scale,
                                         result):
            return result, structure, scale
    return None, structure, None


_SURE_SHARE = 0.25  # of the tolerance: the most a stress set's reference may be off by


def _sure(model: Any, module: Any, job: OracleJob, seed: int, device: str, dtype: torch.dtype,
          scale: float, result: list[torch.Tensor]) -> bool:
    """Whether the reference's outputs at this stress scale match its float64 outputs
    within a quarter of the tolerance. A model that cannot run in float64 (or
    not in the memory left) is taken as sure, as before this check."""
    if dtype == torch.float64 or not any(v.is_floating_point() for v in result):
        return True
    import copy

    try:
        wide = copy.deepcopy(model).double()
        inputs = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                  for v in task_inputs.kept_inputs(module, seed, device, dtype, scale)]
        with torch.no_grad():
            exact, _ = task_inputs.flatten_outputs(wide(*inputs))
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return True
    except Exception:  # noqa: BLE001 - ops without float64 kernels, models that do not copy
        return True
    for ours, wide_value in zip(result, exact):
        if not ours.is_floating_point() or not isinstance(wide_value, torch.Tensor):
            continue
        atol, rtol = _tolerance(ours, module, job)
        if compare_tensor(ours, wide_value.to(ours.dtype), atol * _SURE_SHARE,
                          rtol * _SURE_SHARE).reason is not None:
            return False
    return True


def _inputs_returned(module: Any, job: OracleJob, kept: list[int],
                     variants: list[float | None], outputs: list[list[torch.Tensor]],
                     device: str, dtype: torch.dtype) -> list[str]:
    """Outputs that equal one of the inputs on every kept set: copying passes.

    ReLU of torch.rand inputs is the input itself; a copy kernel is then
    right on the task's contract, and a pass says little about the kernel.
    One input set is made at a time and compared in chunks, and a pair
    that differs is dropped at once: a full-size level-1 task holds 6.4 GB
    per tensor, and all sets at once plus float64 copies ran out of memory.
    """
    pairs: list[tuple[int, int]] | None = None
    for index, variant, result in zip(kept, variants, outputs):
        values = task_inputs.kept_inputs(module, job.seeds[index], device, dtype, variant)
        if pairs is None:
            pairs = [(position, source) for position in range(len(result))
                     for source in range(len(values))]
        pairs = [(position, source) for position, source in pairs
                 if _same(values[source], result[position], _tolerance(result[position], module,
                                                                       job))]
        del values
        if not pairs:
            return []
    return [f"output {position}: input {source} returned unchanged"
            for position, source in pairs or []]


_SAME_CHUNK = 1 << 22  # elements compared at once (float64 copies of both: 64 MB)


def _same(value: Any, output: torch.Tensor, tolerance: tuple[float, float]) -> bool:
    if not isinstance(value, torch.Tensor) or value.shape != output.shape \
            or value.dtype != output.dtype or not output.is_floating_point():
        return False
    atol, rtol = tolerance
    value, output = value.reshape(-1).to(output.device), output.reshape(-1)
    # The first chunk tells most pairs apart; only a true copy is read to its end.
    return all(compare_tensor(value[start:start + _SAME_CHUNK],
                              output[start:start + _SAME_CHUNK], atol, rtol).reason is None
               for start in range(0, output.numel(), _SAME_CHUNK))


def _load_task(source: str, folder: Path, task_folder: str) -> Any:
    try:
        with task_code(IMPORT, keep=(SyntaxError,)):
            module = task_inputs.import_source(source, TASK_MODULE, folder, task_folder)
    except SyntaxError as exc:
        raise TaskProblem(f"the task is not valid Python: line {exc.lineno}: {exc.msg}") from exc
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name, None)):
            raise TaskProblem(f"the task defines no callable {name}")
    return module


def _run_set(model: Any, module: Any, seed: int, device: str, dtype: torch.dtype,
             variant: float | None, reseed: int | None = None) -> tuple[list[torch.Tensor], str]:
    try:
        # Made once and kept; the reference gets a copy, as it may write to its inputs.
        with task_code(INPUTS, keep=(task_inputs.InputError,)):
            inputs = task_inputs.clone_inputs(
                task_inputs.kept_inputs(module, seed, device, dtype, variant))
    except task_inputs.InputError as exc:
        raise TaskProblem(str(exc)) from exc
    if reseed is not None:
        torch.manual_seed(reseed)  # randomness inside forward must not decide the output
    with torch.no_grad(), task_code(FORWARD):
        output = model(*inputs)
    values, structure = task_inputs.flatten_outputs(output)
    for position, value in enumerate(values):
        if not isinstance(value, torch.Tensor):
            raise TaskProblem(f"the reference's output {position} is {type(value).__name__}; "
                              "outputs must be tensors")
    return [v.detach().clone() for v in values], structure


def _check_deterministic(model: Any, module: Any, job: OracleJob,
                         first: list[torch.Tensor], device: str, dtype: torch.dtype) -> None:
    again, _ = _run_set(model, module, job.seeds[0], device, dtype,
                        job.variants[0], reseed=job.seeds[-1] ^ 0x5DEECE66D)
    for position, (a, b) in enumerate(zip(first, again)):
        if not _rerun_same(a, b):
            raise TaskProblem(f"the reference is not deterministic: output {position} differs "
                              "between two runs on the same inputs (seed its randomness or "
                              "remove it from forward)")


def _profile(model: Any, module: Any, seed: int, device: str,
             dtype: torch.dtype) -> tuple[set[str], int]:
    """The reference's compute operators and its FLOPs (matmuls and convolutions)."""
    inputs = task_inputs.clone_inputs(task_inputs.kept_inputs(module, seed, device, dtype))
    with torch.no_grad():
        _, ops, flops = record_ops(lambda: model(*inputs))
    return ops, flops


def _check_checkable(outputs: list[torch.Tensor]) -> None:
    """An output with no finite value on the task's own inputs leaves nothing to check a
    candidate by: that is the task's fault, never the candidate's."""
    for position, value in enumerate(outputs):
        if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).any()):
            raise TaskProblem(f"the reference's output {position} is NaN or Inf everywhere on "
                              f"the task's own inputs ({value.numel():,} values): no candidate "
                              "can be checked against it; fix the task's forward or its "
                              "get_inputs()")


def _all_finite(values: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in values if v.is_floating_point())


def _tolerance(output: torch.Tensor, module: Any, job: OracleJob) -> tuple[float, float]:
    """(atol, rtol) for one output, as the judge holds the candidate to it: the run's
    --atol/--rtol, else the task's output_atol/output_rtol, else the dtype's."""
    return tolerances(str(output.dtype).replace("torch.", ""), _float_attr(module, "output_atol"),
                      _float_attr(module, "output_rtol"), EvalConfig(atol=job.atol, rtol=job.rtol))


def _float_attr(module: Any, name: str) -> float | None:
    value = getattr(module, name, None)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _rerun_same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two runs' outputs agree to float64 rounding, compared a chunk at a time:
    whole float64 copies of a 1.6 G element output took 12 GiB each (KernelBench level
    1's resized tasks, whose backward then ran out of memory on an 80 GB H100)."""
    if a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    # The chunks' answers kept on the device and read back once: a read per chunk waits
    # for a GPU the suite's other lanes share, 384 times for a 1.6 G element output.
    same = torch.ones((), dtype=torch.bool, device=flat_a.device)
    for start in range(0, flat_a.numel(), _SAME_CHUNK):
        same &= torch.isclose(flat_a[start:start + _SAME_CHUNK].double(),
                              flat_b[start:start + _SAME_CHUNK].double(),
                              rtol=1e-6, atol=1e-7, equal_nan=True).all()
    return bool(same)
