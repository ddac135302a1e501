"""The timing phase of the worker: candidates against eager and torch.compile.

Runs only after the judge has accepted the candidates' outputs. Outputs of
timed calls are checked again (against the candidate's own verified outputs
for the same input set), so work done only during warm-up, caches keyed on
pointers or call counts, and stale graph replays show up as inconsistencies.
"""

from __future__ import annotations

import inspect
import re
import statistics
import time
from typing import Any, Callable, ContextManager, Sequence

import torch

from kernelevo.evaluate.analysis.baseline_drift import (PROBE_CALL_LOOPS, PROBE_GPU_SAMPLES,
                                                        STORED_MIN_MS, drift, steady, with_stored)
from kernelevo.evaluate.analysis.kernel_share import is_own, kernel_share
from kernelevo.evaluate.analysis.oom import is_out_of_memory
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child import guards, host_speed
from kernelevo.evaluate.child.baselines import Baselines
from kernelevo.evaluate.child.launch_check import skipped_work
from kernelevo.evaluate.child.profile_take import attach_profiles
from kernelevo.evaluate.child.share_training import training_step_share
from kernelevo.evaluate.child.tf32_tolerance import fixed_rule, tf32_tolerances
from kernelevo.evaluate.child.samplers import load_set
from kernelevo.evaluate.child.timing import TimingRun, speedup_range, time_contestants
from kernelevo.evaluate.child.timing_backward import BackwardTiming, time_backward
from kernelevo.evaluate.shared.cores import (core_words, on_timing_core, timing_core,
                                             visible_gpu_ordinal)
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.messages import Progress, Sender, Timed, Timing, WorkerJob
from kernelevo.evaluate.shared.replies import BaselinesReply, ReadyReply
from kernelevo.evaluate.verdict import TimingStats

_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_CUDA_KERNEL = re.compile(r"__global__\s+(?:[\w:<>,\s\*]+?\s+)?(\w+)\s*\(")


def run_timing(loaded: dict[int, Any], baselines: Baselines, task: Any, job: WorkerJob,
               given: ReadyReply, channel: Sender, snapshot: Any,
               launches: Callable[[], int] | None = None,
               stored: BaselinesReply | None = None,
               unhooked: Callable[[], ContextManager[Any]] | None = None) -> None:
    """Time the loaded candidates against the baselines, profile them, send `Timing`.

    With `stored` times, the candidates are timed beside a brief probe of the
    first stored baseline; the stored times stand when the probe agrees with
    them, else every baseline is timed beside the candidates after all.
    """
    device, dtype, config = job.device, getattr(torch, job.dtype), job.timing
    channel.send(Progress("timing"))
    started = time.perf_counter()
    sets = [task_inputs.kept_inputs(task, seed, device, dtype, variant)
            for seed, variant in zip(given.seeds, given.variants)]
    contestants = dict(baselines.contestants)
    for index, (model, _, _) in loaded.items():
        contestants[f"candidate_{index}"] = model
    probe = _probe(stored, contestants)
    kept: dict[str, dict[tuple[str, int], Any]] = {}
    verified = {f"candidate_{index}": outputs for index, (_, _, outputs) in loaded.items()}

    def after(name: str, measure: str, set_index: int, output: Any) -> str | None:
        values, _ = task_inputs.flatten_outputs(output)
        if name.startswith("candidate_"):
            outputs = kept.setdefault(measure, {})
            first = (name, set_index) not in outputs
            outputs[(name, set_index)] = [
                v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values]
            if first:  # wrong already: its timing ends now, not after every sample
                return _consistency(name, {(name, set_index): outputs[(name, set_index)]},
                                    verified[name], tolerances)
        else:  # a freed reference result must not be there for a candidate to find
            for value in values:
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    value.fill_(float("nan"))
            if measure == "call":  # the loop's earlier outputs were freed unpoisoned
                guards.poison_allocator(device)
        return None

    # The stress set rotates through the timed calls too, but times count on
    # the task's own sets only (a reference's time can depend on the values).
    counted = [i for i, variant in enumerate(given.variants) if variant is None]
    backend = task_inputs.set_user_backend(config.conv_tf32)
    tolerances: Sequence[Sequence[float]] = given.tolerances
    trained_at = tolerances  # the backward's: timed against its own, in TF32 both
    tf32_notes: tuple[str, ...] = ()
    eager = baselines.contestants.get("eager")
    if config.conv_tf32 and uses_convolution(task, eager):
        # TF32 rounds to 10 mantissa bits: a cuDNN convolution's timed output
        # differs from its verified fp32 one by that, through what follows it
        trained_at = fixed_rule(tolerances)
        if eager is None:
            tolerances = trained_at
        else:  # held to eager's own TF32 error (tf32_tolerance.py), on every set
            tolerances, note = tf32_tolerances(eager, sets, tolerances)
            tf32_notes = (note,)
    how, ratios = "beside", {}
    core = timing_core(visible_gpu_ordinal())
    quiet = host_speed.QuietHost(channel, device == "cuda" and config.hold_other_jobs)
    # A backward's host work runs in autograd's device thread, which stays off the timing
    # core, as in a user's process: pinned beside the caller, a Python-launched backward
    # read 0.165 ms a step where plain processes read 0.220 (bench/RESULTS.md).
    with torch.no_grad(), on_timing_core(core) as pinned:
        if probe is None:
            run = time_contestants(contestants, sets, config, after, counted or None, launches,
                                   unhooked=unhooked, quiet=quiet)
        else:
            assert stored is not None and stored.measures is not None
            timed = {n: c for n, c in contestants.items()
                     if n == probe or n.startswith("candidate_")}
            run = time_contestants(timed, sets, config, after, counted or None, launches,
                                   brief={probe: (PROBE_GPU_SAMPLES, PROBE_CALL_LOOPS)},
                                   unhooked=unhooked, quiet=quiet)
            ratios = drift(run.as_json(), stored.measures, probe)
            how = "stored" if steady(ratios) else "drifted"
            if how == "drifted":  # timed as without a store: every baseline beside them
                probed_s = sum(run.seconds.values())
                run = time_contestants(contestants, sets, config, after, counted or None,
                                       launches, unhooked=unhooked, quiet=quiet)
                run.seconds["probe"] = probed_s
        trained = (_backward_timing(contestants, run, sets, given, config, counted, launches,
                                    trained_at, unhooked, quiet) if job.backward else None)
    timing_s = time.perf_counter() - started
    # Profiled after timing, so no profiler state can touch a timed call. The
    # judge answers at once, its hold on the GPU shared from then on (a profile
    # needs no GPU to itself, only no timing beside it). Records the
    # profiler loses are caught by the launch count (outcome.unrecorded_note).
    channel.ask(Timed())
    channel.send(Progress("profiling"))
    started = time.perf_counter()
    shares = {str(index): own_kernel_share(model, module, given.candidates[index], sets[0],
                                           launches)
              for index, (model, module, _) in loaded.items()}
    if job.backward:  # the training step too: a backward of PyTorch's ops hides from the above
        for index, (model, _, _) in loaded.items():
            shares[str(index)]["training"] = training_step_share(
                model, shares[str(index)]["own_names"], sets[0], given.seeds[0], launches)
    # Profiles (profile_take.py): after timing and the shares, so no timed call is watched.
    attach_profiles(shares, loaded, baselines.contestants, task, sets[0], run.measures,
                    torch.cuda.get_device_name(0), str(dtype).replace("torch.", ""))
    inconsistent = {}
    for index, (_, _, outputs_verified) in loaded.items():
        name = f"candidate_{index}"
        problem = run.dropped.get(name) or skipped_work(run.launches, name)
        for measure, outputs in kept.items():
            problem = problem or _consistency(name, outputs, outputs_verified, tolerances)
            if problem:
                break
        if problem:
            inconsistent[str(index)] = f"while timing: {problem}"
    measures = run.as_json()
    spread = host_speed.spread(run.host_us)
    # without a GPU, every call is host time and no speedup is reported
    host_note = host_speed.note(spread, run.launch_bound) if device == "cuda" else None
    notes = (tuple(baselines.notes + run.notes) + tf32_notes
             + tuple(note for note in (host_note, quiet.note()) if note))
    flags, rounds = tuple(run.flags), run.rounds if how != "stored" else {}
    if how == "stored":
        assert stored is not None and stored.measures is not None
        measures = with_stored(measures, stored.measures)
        notes += stored.notes
    if trained is not None:  # timed beside the candidates always: the store holds forwards
        measures, rounds = {**measures, **trained.measures}, {**rounds, **trained.rounds}
        notes, flags = notes + tuple(trained.notes), flags + tuple(trained.flags)
        run.seconds.update(trained.seconds)
        for index in loaded:
            problem = trained.dropped.get(f"candidate_{index}")
            if problem and str(index) not in inconsistent:
                inconsistent[str(index)] = f"while timing its backward ({problem})"
    channel.send(Timing(
        measures=measures, notes=notes, flags=flags,
        ranges=speedup_ranges(measures, rounds, spread, run.launch_bound),
        backward_methods=trained.methods if trained is not None else {},
        inconsistent=inconsistent, shares=shares, compile_s=baselines.compile_s,
        timing_s=timing_s, timing_steps=run.seconds, baselines=how, drift=ratios,
        stored_at=stored.measured_at if stored and probe else "",
        profile_s=time.perf_counter() - started, backend=backend, host_spread=spread,
        host_us=statistics.median(run.host_us) if run.host_us else 0.0,
        timing_core=core_words(pinned),
        tampered=tuple(snapshot.tampered()), device_name=torch.cuda.get_device_name(0),
        versions={"torch": torch.__version__, "triton": _triton_version(),
                  "cuda": str(torch.version.cuda)},
        peak_bytes=task_inputs.peak_gpu_bytes(job.device)))


def _backward_timing(contestants: dict[str, Any], run: TimingRun, sets: list[list[Any]],
                     given: ReadyReply, config: Any, counted: list[int],
                     launches: Callable[[], int] | None,
                     tolerances: Sequence[Sequence[float]],
                     unhooked: Callable[[], ContextManager[Any]] | None = None,
                     quiet: host_speed.QuietHost | None = None) -> BackwardTiming:
    """The train and backward measures (timing_backward.py) of every contestant still timed.

    Candidates' timed gradients are checked against their own first ones at
    the loosest of the task's output tolerances. Out of memory (a graph per
    contestant and input set is held), the forward's times stand alone.
    """
    timed = {name: fn for name, fn in contestants.items() if name not in run.dropped}
    tolerance = (max((atol for atol, _ in tolerances), default=1e-4),
                 max((rtol for _, rtol in tolerances), default=1e-4))
    try:
        return time_backward(timed, sets, given.seeds, config, counted or None, launches,
                             tolerance, unhooked, quiet)
    except Exception as exc:  # noqa: BLE001 - the forward's times stand without these
        if not is_out_of_memory(exc):
            raise
        torch.cuda.empty_cache()
        return BackwardTiming({}, {}, [f"train and backward not timed: out of memory "
                                       f"({str(exc).splitlines()[0][:160]})"], [], {}, {}, {})


def speedup_ranges(measures: dict[str, dict[str, dict[str, Any]]],
                   rounds: dict[str, dict[str, dict[int, float]]],
                   host_spread: float = 0.0, launch_bound: Sequence[str] = ()
                   ) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Candidate index -> measure -> baseline -> [low, high] of its speedup.

    `rounds` pairs the times of contestants timed together; baselines from
    the store come without them and are bounded by their stored quartiles.
    A call-measure pair with a launch-bound contestant spans at least the
    host's speed spread while it was timed (host_speed.py).
    """
    ranges: dict[str, dict[str, dict[str, list[float]]]] = {}
    for measure, by_name in measures.items():
        paired = rounds.get(measure, {})
        for name, own in by_name.items():
            if not name.startswith("candidate_"):
                continue
            index = name.removeprefix("candidate_")
            for baseline, stats in by_name.items():
                if baseline.startswith("candidate_"):
                    continue
                base, mine = TimingStats(**stats), TimingStats(**own)
                interval = speedup_range(base, mine, paired.get(baseline), paired.get(name))
                if measure == "call" and (name in launch_bound or baseline in launch_bound):
                    interval = host_speed.widened(interval, base.median_ms / mine.median_ms,
                                                  host_spread)
                ranges.setdefault(index, {}).setdefault(measure, {})[baseline] = [
                    round(x, 4) for x in interval]
    return ranges


def uses_convolution(task: Any, reference: Any) -> bool:
    """Whether the task computes a convolution (a conv module, or `conv` in its source).

    Only then does cuDNN's TF32 change a timed output; elsewhere timed
    outputs are re-checked at the task's own tolerances.
    """
    if reference is not None and any(isinstance(m, torch.nn.modules.conv._ConvNd)
                                      for m in reference.modules()):
        return True
    try:
        source = inspect.getsource(task)
    except (OSError, TypeError):
        return True  # unknown: the TF32 tolerance, as before this check
    return re.search(r"conv", source, re.IGNORECASE) is not None


def _probe(stored: BaselinesReply | None, contestants: dict[str, Any]) -> str | None:
    """The baseline to probe the stored times with: the first stored one this worker has warm."""
    if stored is None or not stored.measures:
        return None
    names = list(next(iter(stored.measures.values()), {}))
    probe = next((name for name in names if name in contestants), None)
    call = stored.measures.get("call", {}).get(probe or "", {})
    if call.get("median_ms", 0.0) < STORED_MIN_MS:
        return None  # short: timed beside the candidates, in rounds paired with theirs
    return probe


def rotation_check(model: Any, task: Any, job: WorkerJob, given: ReadyReply,
                   verified: list[list[Any]], min_s: float = 1.5) -> str | None:
    """Rotate the input sets through fixed buffers for a while; outputs must stay right."""
    device, dtype = job.device, getattr(torch, job.dtype)
    sets = [task_inputs.kept_inputs(task, seed, device, dtype, variant)
            for seed, variant in zip(given.seeds, given.variants)]
    arena = task_inputs.clone_inputs(sets[0])
    kept: dict[tuple[str, int], Any] = {}
    started, rounds = time.perf_counter(), 0
    while rounds < 2 or time.perf_counter() - started < min_s:
        for set_index, values in enumerate(sets):
            load_set(arena, values)
            try:
                with torch.no_grad():
                    output = model(*arena)
            except Exception as exc:  # a candidate that fails on a later call is inconsistent
                if is_out_of_memory(exc):
                    raise  # out of memory is no inconsistency: the worker reports it as such
                return f"call {rounds * len(sets) + set_index} raised {type(exc).__name__}: {exc}"
            outputs, _ = task_inputs.flatten_outputs(output)
            kept[("candidate", set_index)] = [v.detach().clone() if isinstance(v, torch.Tensor)
                                              else v for v in outputs]
        problem = _consistency("candidate", kept, verified, given.tolerances)
        if problem:
            return f"after {rounds + 1} rounds of rotated inputs: {problem}"
        rounds += 1
    return None


def own_kernel_share(model: Any, module: Any, candidate: dict[str, str],
                     inputs: list[Any], launches: Callable[[], int] | None = None,
                     attempts: int = 3) -> dict[str, Any]:
    """Which GPU kernels one call runs, and how much of their time is the candidate's own.

    A call in which the profiler records none of the candidate's kernels is
    profiled again (up to `attempts` calls in all) before that stands: the
    verdict it leads to, no_custom_kernel, rejects the candidate.
    """
    names = _own_kernel_names(module, candidate["source"])
    count = launches or (lambda: 0)
    before = count()
    for attempt in range(attempts):
        share = _profiled_call(model, names, inputs)
        share["profiled_calls"] = attempt + 1
        if share["own_us"] > 0:
            break
    # Triton launches the candidate made meanwhile, by the launch switch's count:
    # a profile that shows none of them lost its records (it does, on an H200).
    share["launched"] = count() - before
    return share


def _profiled_call(model: Any, names: set[str], inputs: list[Any]) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    given, again = task_inputs.clone_inputs(inputs), task_inputs.clone_inputs(inputs)
    # Two calls: the profiler can drop the kernels at the start of a session.
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        model(*given)
        torch.cuda.synchronize()
        model(*again)
        torch.cuda.synchronize()
    kernels = []
    for event in prof.key_averages():
        duration = getattr(event, "device_time_total", 0.0) or getattr(event, "cuda_time_total", 0.0)
        kernels.append((event.key, duration, is_own(event.key, names)))
    return {**kernel_share(kernels), "own_names": sorted(names)}


def _own_kernel_names(module: Any, source: str) -> set[str]:
    names = set(_CUDA_KERNEL.findall(_LAUNCH_BOUNDS.sub("", source)))
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:
        return names
    for value in _module_values(module):
        if isinstance(value, staticmethod):
            value = value.__func__
        if isinstance(value, KernelInterface):
            inner = value
            while hasattr(inner, "fn"):
                inner = inner.fn
            names.add(getattr(inner, "__name__", ""))
    return {n for n in names if n}


def _module_values(module: Any) -> list[Any]:
    """The module's globals, and the attributes of the classes it defines.

    A backward's kernel is often kept on its autograd.Function (a static
    method or class attribute) while the forward's is a global: the training
    step's share must know both as the candidate's own.
    """
    values = list(vars(module).values())
    for value in list(values):
        if isinstance(value, type) and value.__module__ == getattr(module, "__name__", None):
            values.extend(vars(value).values())
    return values


def _consistency(name: str, kept: dict[tuple[str, int], Any], verified: list[list[Any]],
                 tolerances: Sequence[Sequence[float]]) -> str | None:
    for set_index, expected in enumerate(verified):
        got = kept.get((name, set_index))
        if got is None:
            continue
        for position, (value, reference) in enumerate(zip(got, expected)):
            if not isinstance(value, torch.Tensor):
                return f"set {set_index} output {position} is not a tensor during timing"
            if _identical(value, reference):  # passes any tolerance: one pass, not a dozen
                continue
            atol, rtol = tolerances[position]
            outcome = compare_tensor(value, reference, atol, rtol,
                                     f"set {set_index} output {position} during timing")
            if outcome.reason:
                return outcome.message
    return None


def _identical(value: torch.Tensor, reference: Any) -> bool:
    """Whether a timed output is the verified one bit for bit (so within every tolerance).

    compare_tensor's float64 passes cost 0.1 s on a 256 MB output on the
    H200, most of the judge's timing of a short kernel (bench/RESULTS.md,
    session 17); a deterministic kernel repeats its verified output exactly.
    NaN never equals itself, so an output with NaN is compared in full.
    """
    return (isinstance(reference, torch.Tensor) and type(value) is torch.Tensor
            and value.shape == reference.shape and value.dtype == reference.dtype
            and value.device == reference.device and torch.equal(value, reference))


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "absent"
    return triton.__version__
