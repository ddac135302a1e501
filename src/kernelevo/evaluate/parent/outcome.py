"""From the worker's reports and the way its process ended to one verdict per candidate."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from kernelevo.candidate import Candidate
from kernelevo.config import measure_title
from kernelevo.evaluate.analysis.baseline_drift import DRIFT, ratio_words
from kernelevo.evaluate.analysis.floor import compute_floor
from kernelevo.evaluate.analysis.kernel_share import (no_own_backward, recorded_kernels,
                                                      unrecorded_training_note)
from kernelevo.evaluate.analysis.oom import said_in, summary
from kernelevo.evaluate.analysis.profile import timed_profile, untimed_profile
from kernelevo.evaluate.parent.host import JudgeHost
from kernelevo.evaluate.parent.worker_state import WorkerState
from kernelevo.evaluate.sandbox.pipe import JobResult
from kernelevo.evaluate.shared.messages import CheckedCandidate, Failed, Timing
from kernelevo.evaluate.verdict import (AUTOTUNE_BUDGET_FLAG, CONSTANTS_NOTE,
                                        NO_CUSTOM_KERNEL_FLAG, SPECIALISED_FLAG, TimingStats,
                                        Verdict, speedup, verdict_for)

ISOLATION = ("own process group, wall-clock kill, output cap, scratch cwd, {context}"
             "network {network}, {confinement}")
# Where a worker that ended before its warm-up was done was: no candidate had loaded.
WARM_UP = ("the worker's warm-up (the task's Model run for the eager and torch.compile "
           "baselines, before any candidate loaded)")


def _crash_verdict(result: JobResult, during: str) -> Verdict:
    tail = result.log_tail
    if result.timed_out:
        # A long exit is a GPU context torn down slowly: worth seeing in the verdict.
        slow_exit = (f"; the killed process took {result.exit_wait_s:.0f} s to exit"
                     if result.exit_wait_s >= 5 else "")
        return verdict_for("wall_clock_limit", f"killed after the time limit during {during}"
                           + slow_exit, logs=tail)
    if result.output_exceeded:
        return verdict_for("output_limit", f"printed more than the output limit during {during}",
                           logs=tail[-2000:])
    if result.signal_name:
        return verdict_for("killed_by_signal", f"the process died from {result.signal_name} "
                           f"during {during}{_last_heard(result)}", logs=tail)
    if result.exit_code and said_in(tail):  # out of memory where no report could be sent
        return verdict_for("out_of_memory", f"{summary(tail, during)} (the process exited with "
                           f"code {result.exit_code} without reporting)", logs=tail)
    return verdict_for("exited_early", f"the process exited with code {result.exit_code} "
                       f"during {during} without reporting{_last_heard(result)}", logs=tail)


def _last_heard(result: JobResult) -> str:
    """Where the process was by its own account: the kind of the last message it sent."""
    kinds = [str(m.get("kind")) for m in result.messages if m.get("kind") != "progress"]
    phases = [str(m.get("phase")) for m in result.messages if m.get("kind") == "progress"]
    if not kinds:
        return ""
    return f" (its last message: {kinds[-1]!r}" + (f", last step: {phases[-1]!r})" if phases
                                                    else ")")


def build_verdicts(state: WorkerState, result: JobResult, judge: JudgeHost) -> list[Verdict]:
    verdicts = []
    for index, candidate in enumerate(state.candidates):
        verdict = _one(state, result, judge, index, candidate)
        # A CUDA context is only made where the candidate ran on a GPU.
        context = "fresh CUDA context, " if judge.device == "cuda" else ""
        isolation = ISOLATION.format(context=context, network=result.network,
                                     confinement=result.confinement)
        verdicts.append(replace(verdict, isolation=isolation,
                                phases_s=_phases(state.reports.get(index), state.timing,
                                                 state.phases, state.failures.get(index)),
                                environment=_environment(judge, state.timing)))
    return verdicts


def _one(state: WorkerState, result: JobResult, judge: JudgeHost, index: int,
         candidate: Candidate) -> Verdict:
    verdict = _decided(state, result, judge, index, candidate)
    note = autotune_note(state.reports.get(index), judge.config.timing.autotune_budget_s)
    if note is None:
        return verdict
    return replace(verdict, flags=verdict.flags + (AUTOTUNE_BUDGET_FLAG,),
                   notes=verdict.notes + (note,))


def autotune_note(report: CheckedCandidate | None, budget_s: float) -> str | None:
    """What the autotuning budget cut, when it cut anything."""
    if report is None or report.autotune_skipped <= 0:
        return None
    tried = report.autotune_measured + report.autotune_skipped
    return (f"autotuning stopped at its budget of {budget_s:g} s ([eval.timing] "
            f"autotune_budget_s): {report.autotune_measured} of {tried} configs measured in "
            f"{report.autotune_s:.1f} s, the best of those used")


def _decided(state: WorkerState, result: JobResult, judge: JudgeHost, index: int,
             candidate: Candidate) -> Verdict:
    decision = state.decisions.get(index)
    if decision is None:
        return _crash_verdict(result, "loading or checking" if state.warmed_up else WARM_UP)
    kind, details = decision
    if kind == "failed":
        return verdict_for(details["reason"], details.get("message", ""),
                           errors=details.get("metrics"), logs=result.log_tail)
    flags = tuple(f"trivial answer passes: {t}" for t in state.reference.trivial or ())
    notes = tuple(details.get("notes", []))
    if flags:
        notes += ("degenerate task: a trivial answer passes the tolerance, so a pass proves "
                  "little",)
    unchecked = constants_note(state.reference.constants)
    if unchecked:  # a note, not a flag: the outputs were checked, only not against these
        notes += (unchecked,)
    if candidate.backend == "pytorch":
        flags = (NO_CUSTOM_KERNEL_FLAG,) + flags
    base = verdict_for("pytorch_only" if candidate.backend == "pytorch" else "passed",
                       errors=details.get("metrics"), flags=flags, notes=notes)
    base = replace(base, gpu_peak_bytes=_peaks(state.reference.peak_bytes,
                                               state.checked_peak_bytes))
    if judge.device == "cpu" or not state.time_them:
        why = "no GPU" if judge.device == "cpu" else "timing not requested"
        return replace(base, notes=base.notes + (f"timings unavailable: {why}",),
                       profile=untimed_profile(judge.device))
    if state.timing is None:
        return _crash_verdict(result, "timing")
    return _timed(base, state, judge, index, candidate)


_CONSTANTS_SHOWN = 6  # names a note lists before "and N more"


def constants_note(constants: tuple[str, ...]) -> str | None:
    """What a pass leaves unchecked where the task builds weights of one value throughout.

    The candidate's ModelNew may name or lay out its weights its own way, so
    the judge cannot give both sides other values alike: it says so instead.
    """
    if not constants:
        return None
    listed = ", ".join(constants[:_CONSTANTS_SHOWN])
    if len(constants) > _CONSTANTS_SHOWN:
        listed += f" and {len(constants) - _CONSTANTS_SHOWN} more"
    return (f"{CONSTANTS_NOTE}{listed}: the task builds them so, and a kernel that "
            "ignores them passes; give them random values in the task's __init__ to have "
            "them checked")


def _timed(base: Verdict, state: WorkerState, judge: JudgeHost, index: int,
           candidate: Candidate) -> Verdict:
    timing = state.timing
    assert timing is not None  # _decided made a crash verdict otherwise
    if timing.tampered:
        return verdict_for("harness_tampered", "patched during timing: "
                           + ", ".join(timing.tampered[:5]))
    problem = timing.inconsistent.get(str(index))
    if problem:
        return verdict_for("inconsistent_under_timing", problem)
    share = timing.shares.get(str(index), {})
    training = share.get("training")
    unknown = unrecorded_note(share) if share else None
    if unknown:  # launches and the knockout run still hold
        base = replace(base, notes=base.notes + (unknown,))
        share = {}
    if candidate.backend != "pytorch" and share and share.get("own_us", 0) <= 0:
        return verdict_for("no_custom_kernel", "the profiler saw none of the candidate's kernels "
                           f"run in {share.get('profiled_calls', 1)} profiled call(s) (kernels "
                           f"seen: {', '.join(list(share.get('kernels', {}))[:5])})")
    unknown = unrecorded_training_note(training) if training else None
    if unknown:  # the gradients' checks (launches, knockout) still hold
        base = replace(base, notes=base.notes + (unknown,))
        training = None
    problem = no_own_backward(training) if training else None
    if candidate.backend != "pytorch" and problem:
        return verdict_for("ghost_backward", problem)
    # a measure without this candidate (a training step it was not timed in) is left out
    measures = {measure: _contestants(stats, index)
                for measure, stats in timing.measures.items()
                if f"candidate_{index}" in stats}
    measure = judge.config.timing.measure  # the judge's own setting, never the worker's word
    timings = measures[measure]
    own = timings["candidate"]
    notes = list(base.notes) + list(timing.notes) + [measures_note(measures, measure)]
    if timing.backward_methods:
        notes.append(backward_note(timing.backward_methods, index))
    said = baselines_note(timing)
    if said:
        notes.append(said)
    if share:
        notes.append(kernel_time_note(share, training))
    elif training:
        notes.append(training_time_note(training))
    floor = compute_floor(state.reference.bytes_moved, state.reference.flops,
                          timing.device_name, judge.config.dtype_name)
    gpu_own = measures["gpu"]["candidate"]
    if floor is not None:
        notes.append(f"physical floor {floor.floor_ms:.4f} ms ({floor.bound}-bound)")
        if gpu_own.median_ms < floor.floor_ms:
            return verdict_for("beats_physical_floor", f"GPU time {gpu_own.median_ms:.4f} ms is "
                               f"under the floor of {floor.floor_ms:.4f} ms ({floor.bound}-bound)")
    eager, compiled = timings.get("eager"), timings.get("compile")
    return replace(base, timings=timings, measures=measures, timing_measure=measure,
                   gpu_peak_bytes=_peaks(state.reference.peak_bytes, timing.peak_bytes),
                   speedup_ranges=timing.ranges.get(str(index), {}),
                   profile=timed_profile(share),
                   notes=tuple(notes), flags=base.flags + timing.flags,
                   speedup_vs_eager=speedup(eager, own), speedup_vs_compile=speedup(compiled, own))


def _peaks(oracle: int, worker: int) -> dict[str, int]:
    """The oracle's and the worker's GPU allocator peaks, those known (above 0)."""
    return {name: int(b) for name, b in (("oracle", oracle), ("worker", worker)) if b}


def unrecorded_note(share: dict[str, Any]) -> str | None:
    """Why a profile proves nothing about the candidate's own kernels, if it does not.

    It recorded no kernel at all (copies only), or none of the Triton launches
    that the launch switch counted during the profiled calls: the profiler
    lost records, which says nothing either way.
    """
    calls = share.get("profiled_calls", 1)
    if not recorded_kernels(share):
        return f"the profiler recorded no kernel in {calls} call(s): own kernel share unknown"
    if share.get("own_us", 0) <= 0 and share.get("launched", 0) > 0:
        return (f"the profiler recorded none of the candidate's {share['launched']} Triton "
                f"launch(es) in {calls} profiled call(s): own kernel share unknown")
    return None


def _contestants(stats: dict[str, Any], index: int) -> dict[str, TimingStats]:
    """One measure's stats, with this candidate's under the name 'candidate'."""
    own = {"candidate": TimingStats(**stats[f"candidate_{index}"])}
    own.update({name: TimingStats(**values) for name, values in stats.items()
                if not name.startswith("candidate_")})
    return own


def backward_note(methods: dict[str, str], index: int) -> str:
    """How each contestant's backward alone was timed (timing_backward.py)."""
    named = {("candidate" if name == f"candidate_{index}" else name): how
             for name, how in methods.items()
             if not name.startswith("candidate_") or name == f"candidate_{index}"}
    words = {"replayed graph": "its backward replayed on one forward's graph per input set",
             "train-forward": "train minus forward with grad (its graph refuses a replay)"}
    return ("backward alone timed as: " + "; ".join(f"{name}: {words.get(how, how)}"
                                                     for name, how in named.items()))


def measures_note(measures: dict[str, dict[str, TimingStats]], used: str) -> str:
    """One line with every measure's speedup vs eager, naming the one speedups use."""
    parts = []
    for measure, stats in measures.items():
        gain = speedup(stats.get("eager"), stats["candidate"])
        if gain is not None:
            parts.append(f"{measure_title(measure)} {gain:.2f}x")
    return (f"speedups use {measure_title(used)}; vs eager by measure: "
            + ", ".join(parts))


def _phases(report: CheckedCandidate | None, timing: Timing | None,
            judged: dict[str, float] | None = None,
            failure: Failed | None = None) -> dict[str, float]:
    phases = dict(judged or {})
    if failure:  # where a candidate that failed to build, load or run spent its time
        phases["failed_step"] = failure.failed_after_s
        if failure.build_s:
            phases["build"] = failure.build_s
    if report:
        phases["setup"] = report.setup_s
        phases["build"] = report.build_s
        phases["load"] = report.load_s - report.build_s
        phases["first_call"] = report.first_call_s
        if report.autotune_s:
            phases["autotune"] = report.autotune_s  # within first_call and correctness
        phases["correctness"] = report.check_s
    if timing:
        phases["timing"] = timing.timing_s
        phases.update({f"timing_{step}": s for step, s in timing.timing_steps.items()})
        phases["profile"] = timing.profile_s
        if timing.compile_s is not None:
            phases["compile_baseline"] = timing.compile_s
    return {k: round(v, 4) for k, v in phases.items()}


def _environment(judge: JudgeHost, timing: Timing | None) -> dict[str, str]:
    environment = {"device": judge.device, "precision": judge.config.precision,
                   "policy": judge.config.policy, "torch": torch.__version__}
    if timing:
        environment["gpu"] = timing.device_name
        environment.update(timing.versions)
        if timing.backend:
            environment["timed_under"] = timing.backend
        environment["host_speed_spread"] = f"{timing.host_spread:.1%}"
        if timing.host_us:  # the probe's median: a host this slow timed the calls
            environment["host_probe_us"] = f"{timing.host_us:.0f}"
        if timing.timing_core:
            environment["timing_core"] = timing.timing_core
        environment["baselines"] = (f"stored at {timing.stored_at}" if timing.baselines == "stored"
                                    else "timed beside the candidate")
        if timing.baselines == "drifted":  # stored, but the probe was off: timed beside after all
            environment["baseline_drift"] = ratio_words(timing.drift)
    return environment


def baselines_note(timing: Timing) -> str | None:
    """How the baselines' times came, when not from a timing beside the candidate alone."""
    probe = f"the drift probe's time over the stored one {ratio_words(timing.drift)}"
    if timing.baselines == "stored":
        return (f"baseline times from the task's store, timed at {timing.stored_at} in a worker "
                f"before any candidate loaded; {probe}")
    if timing.baselines == "drifted":
        return (f"the task's stored baseline times had drifted ({probe}, more than "
                f"{DRIFT:.0%} off): the baselines were timed beside the candidate instead")
    return None


# Refusing other sizes with an error of its own, at init or in forward.
_REFUSALS = ("init_failed", "forward_failed")


def shape_variation_verdict(original: Verdict, varied: Verdict, described: str) -> Verdict:
    """The verdict once the candidate has also run at other sizes (`described`).

    Correct there: unchanged, with a note. Raising an error of its own there
    (a specialised kernel that says so): it passes, flagged. Anything else
    (wrong numbers, NaN, a crash): not a pass, as it would hand a user wrong
    numbers the day a size changes.
    """
    if varied.ok:
        return replace(original, notes=original.notes + (f"also correct at {described}",))
    if varied.reason in _REFUSALS:
        first_line = (varied.message.strip().splitlines() or [""])[-1][:200]
        return replace(original, flags=original.flags + (SPECIALISED_FLAG,),
                       notes=original.notes + (f"refuses other sizes ({described}): "
                                               f"{first_line}; export guards the task's "
                                               "shapes",))
    return verdict_for("shape_specialised", f"at sizes {described}: {varied.status} "
                       f"({varied.reason}): {varied.message}", errors=varied.errors,
                       logs=varied.logs)


def kernel_time_note(share: dict[str, Any], training: dict[str, Any] | None = None,
                     top: int = 4) -> str:
    """The profiler's finding for one call: the own share and where GPU time went.

    It goes back to the model with the verdict, so it names the kernels
    (the candidate's own marked *) that took the most time; with a profiled
    training step (a task whose backward is judged), the step's own share
    and its backward's kernels too.
    """
    step = f" (training step: {training['own_share']:.0%})" if training else ""
    listed = _by_time(share.get("kernels", {}), top)
    return (f"own kernels: {share['own_share']:.0%} of GPU kernel time{step}"
            + (f"; by time: {listed}" if listed else "")
            + (_backward_part(training, top) if training else ""))


def training_time_note(training: dict[str, Any], top: int = 4) -> str:
    """The training step's finding alone, where the forward's profile proved nothing."""
    return (f"own kernels in the training step: {training['own_share']:.0%} of GPU kernel time"
            + _backward_part(training, top))


def _backward_part(training: dict[str, Any], top: int) -> str:
    """`; backward: 85% own, by time: ...`: the profiled backward's share and busiest kernels."""
    backward = training.get("backward", {})
    listed = _by_time(backward.get("kernels", {}), top)
    return (f"; backward: {backward.get('own_share', 0.0):.0%} own"
            + (f", by time: {listed}" if listed else ""))


def _by_time(kernels: dict[str, dict[str, Any]], top: int) -> str:
    """The `top` busiest kernels, the candidate's own marked *, and how many are left out."""
    ranked = sorted(kernels.items(), key=lambda item: -item[1]["us"])
    listed = ", ".join(f"{name[:60]}{'*' if entry['own'] else ''} {entry['us']:.1f} us"
                       for name, entry in ranked[:top])
    more = f" and {len(ranked) - top} more" if len(ranked) > top else ""
    return listed + more if listed else ""

