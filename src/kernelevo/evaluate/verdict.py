"""Verdicts: the structured outcome of judging one candidate.

A failed candidate is data, never an exception. Every status has a small set
of named reasons so the search and the user can act on them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kernelevo.evaluate.analysis.profile import Profile

STATUSES = (
    "ok",
    "compile_error",
    "runtime_error",
    "incorrect",
    "rejected",
    "timeout",
    "crashed",
    "skipped",
)

# reason -> (status, one-line explanation shown to users and fed back to the model)
REASONS: dict[str, tuple[str, str]] = {
    "passed": ("ok", "correct on every input set and honest"),
    "pytorch_only": ("ok", "correct, but no Triton or CUDA kernel of its own ran: a PyTorch "
                     "baseline, never counted as a kernel result"),
    # compile_error
    "syntax_error": ("compile_error", "the candidate file is not valid Python"),
    "import_failed": ("compile_error", "importing the candidate raised"),
    "compile_failed": ("compile_error", "a kernel failed to compile"),
    "no_modelnew": ("compile_error", "the file defines no class ModelNew"),
    # runtime_error
    "init_failed": ("runtime_error", "ModelNew(*get_init_inputs()) raised"),
    "forward_failed": ("runtime_error", "ModelNew.forward raised"),
    "cuda_error": ("runtime_error", "a CUDA error (illegal address, launch failure)"),
    "out_of_memory": ("runtime_error", "the candidate ran out of GPU or host memory"),
    "backward_failed": ("runtime_error", "the candidate's backward raised (a task whose "
                        "backward is judged)"),
    # incorrect
    "output_mismatch": ("incorrect", "values differ from the reference beyond tolerance"),
    "non_finite": ("incorrect", "NaN or Inf where the reference is finite"),
    "wrong_shape": ("incorrect", "an output has the wrong shape"),
    "wrong_dtype": ("incorrect", "an output has the wrong dtype"),
    "wrong_device": ("incorrect", "an output is on the wrong device"),
    "wrong_structure": ("incorrect", "the number or nesting of outputs differs"),
    "shape_specialised": ("incorrect", "wrong when the task's sizes are perturbed"),
    "stress_inputs_failed": ("incorrect", "right on the task's own inputs, wrong on the "
                             "rescaled stress set (its value range is named)"),
    "not_differentiable": ("incorrect", "the backward is judged, but no output carries an "
                           "autograd graph (grad_fn): ModelNew computes no gradients"),
    "gradient_mismatch": ("incorrect", "a gradient differs from the reference's beyond "
                          "tolerance (the tensor, the input set and its max error are named)"),
    # rejected: honesty
    "not_a_tensor": ("rejected", "an output is not a plain torch.Tensor (subclass or other)"),
    "inherits_reference": ("rejected", "ModelNew inherits from or wraps the reference Model"),
    "try_fallback": ("rejected", "try/except around the computation can fall back to PyTorch"),
    "reference_ops_reused": ("rejected", "the candidate calls the reference's PyTorch ops"),
    "library_compute": ("rejected", "strict policy: PyTorch compute ops are not allowed"),
    "ghost_kernel": ("rejected", "disabling the candidate's kernels does not change its output"),
    "ghost_backward": ("rejected", "no own kernel runs during backward, or disabling the "
                       "candidate's kernels there does not change its gradients"),
    "reference_autograd": ("rejected", "the gradients come from PyTorch's autograd of the "
                           "reference's ops, not from a custom autograd.Function's own kernels"),
    "cached_gradients": ("rejected", "gradients do not follow the loss on a repeated call "
                         "(kept from an earlier call)"),
    "no_custom_kernel": ("rejected", "no kernel of the claimed backend is defined or launched"),
    "identity_caching": ("rejected", "results keyed on data_ptr, id() or a cache decorator"),
    "stateful_forward": ("rejected", "forward keeps counters or global state between calls"),
    "inconsistent_under_timing": ("rejected", "outputs during timing differ from the reference"),
    "cuda_graph": ("rejected", "the candidate captures or replays CUDA graphs itself"),
    "side_stream": ("rejected", "work on a side CUDA stream the timer would miss"),
    "background_thread": ("rejected", "threads or processes outlive the forward call"),
    "lazy_output": ("rejected", "tensor subclass or deferred computation in the output path"),
    "harness_tampered": ("rejected", "the candidate patched timers, sync, comparisons or torch"),
    "harness_introspection": ("rejected", "gc, frames, sys.modules or builtins are inspected"),
    "mutated_inputs": ("rejected", "the candidate changed its inputs in place"),
    "file_io": ("rejected", "the candidate reads or writes files"),
    "spawned_process": ("rejected", "the candidate starts processes"),
    "dynamic_code": ("rejected", "exec/eval/compile/__import__ hide code from the checks"),
    "beats_physical_floor": ("rejected", "faster than bytes/bandwidth or FLOPs/peak allows"),
    # timeout and crashes
    "wall_clock_limit": ("timeout", "the candidate ran past its wall-clock limit"),
    "killed_by_signal": ("crashed", "the process died from a signal (segfault, abort)"),
    "exited_early": ("crashed", "the process exited before reporting (os._exit, sys.exit)"),
    "output_limit": ("crashed", "the candidate printed more than the output limit"),
    # skipped
    "no_gpu": ("skipped", "this candidate needs a GPU and none is present"),
    "no_nvcc": ("skipped", "no GPU and no nvcc to compile-check the CUDA source"),
    "compile_check_unavailable": ("skipped", "nvcc here lacks headers torch needs"),
}


# The flag of a verdict whose candidate launched no kernel of a custom backend.
NO_CUSTOM_KERNEL_FLAG = "no_custom_kernel"
# A kernel that refuses other sizes of the task with an error of its own:
# correct where it runs, exported with a guard that raises at other shapes.
SPECIALISED_FLAG = "specialised_to_task_sizes"
# Triton's autotuner spent the candidate's budget: configs left were skipped.
AUTOTUNE_BUDGET_FLAG = "autotune_budget_hit"
# How the note on weights the task builds with one value throughout starts
# (parent/outcome.py): the model's feedback leaves it out, as it would read
# there as leave to drop them.
CONSTANTS_NOTE = "constant parameters: "


@dataclass(frozen=True)
class ErrorMetrics:
    """How far an output is from the reference (worst over outputs and sets)."""

    max_abs_error: float
    max_rel_error: float
    mismatch_fraction: float
    rel_l2_error: float
    worst_index: tuple[int, ...] = ()
    worst_value: float = 0.0
    worst_expected: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0


@dataclass(frozen=True)
class TimingStats:
    """Samples of one contestant, in milliseconds."""

    median_ms: float
    iqr_ms: float
    min_ms: float
    samples: int
    method: str = "events"
    mean_ms: float | None = None


@dataclass(frozen=True)
class Verdict:
    """The judgement of one candidate; `reason` is a key of REASONS."""

    status: str
    reason: str
    message: str = ""
    errors: ErrorMetrics | None = None
    timings: dict[str, TimingStats] = field(default_factory=dict)
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    # Which measure (gpu, call, kernelbench) `timings` and the speedups use;
    # `measures` holds every measure taken, by measure and contestant.
    timing_measure: str = ""
    measures: dict[str, dict[str, TimingStats]] = field(default_factory=dict)
    # By measure and baseline: [low, high] of the speedup a rerun can show
    # (timing.py, speedup_range); a difference inside it is no difference.
    speedup_ranges: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    logs: str = ""
    phases_s: dict[str, float] = field(default_factory=dict)
    isolation: str = ""
    environment: dict[str, str] = field(default_factory=dict)
    # The most GPU memory each process of a passing verdict's allocator held at once, in
    # bytes: the reference's oracle and the candidate's worker (its own word), and the
    # re-check's at other sizes beside them (recheck_oracle, recheck_worker), for sizing
    gpu_peak_bytes: dict[str, int] = field(default_factory=dict)
    # Where a timed call's time goes and how far it is from the roofline (profile.py).
    profile: Profile | None = None

    @property
    def ok(self) -> bool:
        """Correct and honest; a PyTorch baseline is ok too (see passed_kernel)."""
        return self.status == "ok"

    @property
    def passed_kernel(self) -> bool:
        """Ok and computed by a custom kernel: what eval, compare and suites count."""
        return self.ok and NO_CUSTOM_KERNEL_FLAG not in self.flags

    @property
    def speedup_vs_eager_high(self) -> float | None:
        """The high end of speedup_vs_eager's interval under the verdict's measure; None
        without one. The search keeps an elite or a best until a rival beats this."""
        if self.speedup_vs_eager is None:
            return None
        interval = self.speedup_ranges.get(self.timing_measure, {}).get("eager")
        return float(interval[1]) if interval else None

    def speedup_in(self, measure: str, baseline: str) -> float | None:
        """The candidate's speedup over `baseline` under any measure taken; None without it."""
        stats = self.measures.get(measure, {})
        own = stats.get("candidate")
        return speedup(stats.get(baseline), own) if own is not None else None

    @property
    def train_measure(self) -> str:
        """The training step's measure that matches the verdict's (`train_call`, `train_gpu`)."""
        return workload_measure("train", self.timing_measure)

    @property
    def ranked_measure(self) -> str:
        """The measure a search ranks by: the training step's where it was timed (a task
        whose backward is judged: `evolve --backward` searches forward and backward),
        else the verdict's own."""
        trained = self.train_measure
        return trained if "candidate" in self.measures.get(trained, {}) else self.timing_measure

    def ranked_speedup(self, baseline: str = "eager") -> float | None:
        """The speedup over `baseline` under `ranked_measure`: what the run store keeps in
        its speedup columns and the search's fitness reads."""
        if self.ranked_measure == self.timing_measure:
            return self.speedup_vs_eager if baseline == "eager" else self.speedup_vs_compile
        return self.speedup_in(self.ranked_measure, baseline)

    @property
    def ranked_speedup_high(self) -> float | None:
        """The high end of `ranked_speedup()`'s interval over eager; None without one."""
        if self.ranked_speedup() is None:
            return None
        interval = self.speedup_ranges.get(self.ranked_measure, {}).get("eager")
        return float(interval[1]) if interval else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Verdict":
        data = dict(data)
        if data.get("errors"):
            errors = dict(data["errors"])
            errors["worst_index"] = tuple(errors.get("worst_index", ()))
            data["errors"] = ErrorMetrics(**errors)
        data["timings"] = {k: TimingStats(**v) for k, v in data.get("timings", {}).items()}
        data["measures"] = {measure: {k: TimingStats(**v) for k, v in stats.items()}
                            for measure, stats in data.get("measures", {}).items()}
        data["flags"] = tuple(data.get("flags", ()))
        data["notes"] = tuple(data.get("notes", ()))
        if data.get("profile"):
            data["profile"] = Profile.from_dict(data["profile"])
        return cls(**data)


def workload_measure(workload: str, measure: str) -> str:
    """A backward workload's measure (`train_gpu`, `backward_call`) matching a forward's.

    The forward's gpu and call measures have one each; KernelBench's protocol
    times the forward only, so its verdicts rank training by GPU time.
    """
    return f"{workload}_{'gpu' if measure == 'kernelbench' else measure}"


def speedup(baseline: TimingStats | None, own: TimingStats) -> float | None:
    """Baseline over candidate: medians, or means for KernelBench's protocol (its statistic)."""
    if baseline is None:
        return None
    if own.method == "kernelbench" and baseline.mean_ms and own.mean_ms:
        return baseline.mean_ms / own.mean_ms
    return baseline.median_ms / own.median_ms


def verdict_for(reason: str, message: str = "", **fields: Any) -> Verdict:
    """Build a verdict whose status follows from its named reason."""
    status, explanation = REASONS[reason]
    return Verdict(status=status, reason=reason, message=message or explanation, **fields)
