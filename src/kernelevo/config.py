"""Settings of an evaluation, one typed tree shared by eval, compare and evolve.

EvalConfig and its TimingConfig go to and from JSON-like values through
`schema.settings_to_dict` and `schema.settings_from_dict` only: a config file, a serve job, the
worker's job on the pipe and a stored run are read by that one codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kernelevo.errors import ConfigError
from kernelevo.schema import POSITIVE, Annotated, Bound, OneOf, check_fields

PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
POLICIES = ("strict", "default", "permissive")
DEVICES = ("auto", "cuda", "cpu")
# The timing measures (`--timing`, `[eval.timing] measure`) and their titles in reports
MEASURE_TITLES = {"gpu": "GPU time", "call": "call time", "kernelbench": "KernelBench time"}
TIMING_MEASURES = tuple(MEASURE_TITLES)


# Measures of a task whose backward is judged: reported beside the chosen one, not chosen
WORKLOAD_TITLES = {"train_gpu": "train GPU time", "train_call": "train call time",
                   "backward_gpu": "backward GPU time", "backward_call": "backward call time"}
_WORKLOAD_WORDS = {"train": "forward and backward", "backward": "the backward alone"}


def measure_title(measure: str) -> str:
    """How reports name a timing measure ("call time"); an unknown name as it is."""
    return MEASURE_TITLES.get(measure) or WORKLOAD_TITLES.get(measure, measure)


def measure_heading(measure: str) -> str:
    """A measure's title with what a backward task's workload times, for headings."""
    words = _WORKLOAD_WORDS.get(measure.split("_")[0]) if measure in WORKLOAD_TITLES else None
    return f"{measure_title(measure)} ({words})" if words else measure_title(measure)


BASELINES = ("eager", "compile")
# Upper bounds that keep a typo (1e8 input sets, 1e12 samples) from running out of memory
# or time instead of being refused.
MAX_INPUT_SETS = 64
MAX_SAMPLES = 100_000
# (atol, rtol) by output dtype: strict enough that TF32 or bf16 shortcuts in an
# fp32 task fail, loose enough for honest reordering of fp32 sums.
DEFAULT_TOLERANCES = {
    "float32": (1e-4, 1e-4),
    "float64": (1e-7, 1e-7),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}


@dataclass(frozen=True)
class TimingConfig:
    """How contestants are timed; times in milliseconds unless named otherwise."""

    warmup_ms: Annotated[float, POSITIVE] = 50.0
    target_ms: Annotated[float, POSITIVE] = 300.0  # measured time wanted per contestant
    # Bounded: a job asking for 1e12 samples would time one contestant forever.
    min_samples: Annotated[int, Bound(1, MAX_SAMPLES)] = 20
    max_samples: Annotated[int, Bound(1, MAX_SAMPLES)] = 200
    # The gpu measure stops once every contestant's median is known within
    # this fraction of it (the median's 95 % notch, 1.57 IQR / sqrt(n)), after
    # min_samples: a steady kernel needs no 200 samples, and each sample holds
    # the GPU from a suite's other lanes (its timing was half the wall time of
    # a suite on an H100, bench/RESULTS.md). 0: the samples target_ms asks.
    gpu_precision: Annotated[float, Bound(0.0, 0.5)] = 0.01
    cuda_graph: bool = False
    baselines: tuple[Annotated[str, OneOf(BASELINES)], ...] = BASELINES
    # The measure that speedups, fast_p and the search's fitness use: call
    # (host time per call in a back-to-back loop, launch overhead included:
    # what a user calling the model eagerly waits), gpu (device time per call
    # with launch gaps hidden, as under CUDA graphs) or kernelbench
    # (KernelBench's harness protocol). Call is the default: on small
    # multi-kernel tasks the gpu measure called kernels faster that a user
    # calling them finds slower (bench/RESULTS.md, issue 19).
    measure: Annotated[str, OneOf(TIMING_MEASURES)] = "call"
    # torch.compile is timed per call of the task inside one compiled model
    # that calls it on this many input sets, as compile users get it: a whole
    # compiled model enters its compiled code once per model call, not once
    # per small module in it (that entry cost 30-125 us a call on an H100,
    # more than eager's whole call on small tasks: bench/RESULTS.md). 1: the
    # task's module compiled and timed alone.
    compile_model_calls: Annotated[int, Bound(1, 16)] = 4
    # length of one loop of back-to-back calls: long enough that the loop's
    # own start and end (a synchronisation, the first launch's latency) are
    # a small part of it
    call_loop_ms: Annotated[float, POSITIVE] = 10.0
    # call-time loops wanted per contestant, in all (each a round that pairs
    # the contestants' times for a speedup's interval)
    call_target_ms: Annotated[float, POSITIVE] = 150.0
    # TF32 for fp32 convolutions in the timed contestants: PyTorch's own
    # default, so on, as users run (off, a ConvTranspose3d task's eager call
    # timed 7.89 ms against 3.58 ms in a user's process on an H100; on, the
    # judge's convolution speedups fell within 10 % of a plain process's,
    # bench/RESULTS.md "Speedups users can reproduce"). Timed
    # outputs of convolution tasks are re-checked at 1e-2, as TF32 rounds to
    # 10 mantissa bits; the reference's correctness stays strict fp32.
    conv_tf32: bool = True
    # Baselines timed once per task, in a worker before any candidate loads,
    # and reused: each candidate is timed beside a brief drift probe of them,
    # and timed beside every baseline again when the probe has drifted. Off,
    # every candidate is timed beside every baseline.
    stored_baselines: bool = True
    # Seconds a candidate's @triton.autotune may spend benchmarking configs;
    # past it the configs left are skipped and the verdict says so.
    autotune_budget_s: Annotated[float, POSITIVE] = 60.0
    # While contestants' calls are timed (the call measure), the judge's other jobs
    # (a suite's other lanes: oracles, workers, builds) stand still (SIGSTOP),
    # as a plain process times on a quiet machine: busy other cores slowed a
    # one-launch call 1.4-1.8x on an H100 through the shared cache, memory and
    # clock, though the timing core was its own (bench/RESULTS.md,
    # `host_load.py`). Off: they run on beside the timing.
    hold_other_jobs: bool = True

    def __post_init__(self) -> None:
        check_fields(self, section="timing")
        if self.min_samples > self.max_samples:
            raise ConfigError(f"timing min_samples ({self.min_samples}) is above max_samples "
                              f"({self.max_samples}): give min_samples <= max_samples")


@dataclass(frozen=True)
class EvalConfig:
    """Everything that decides a verdict; the same object serves every command."""

    device: Annotated[str, OneOf(DEVICES)] = "auto"
    precision: Annotated[str, OneOf(tuple(PRECISIONS))] = "fp32"
    # One of them a stress set, so 2 at least; each set's outputs are kept in memory.
    input_sets: Annotated[int, Bound(2, MAX_INPUT_SETS)] = 3
    atol: Annotated[float | None, POSITIVE] = None
    rtol: Annotated[float | None, POSITIVE] = None
    policy: Annotated[str, OneOf(POLICIES)] = "default"
    static_checks: bool = True
    timeout_s: Annotated[float, POSITIVE] = 300.0
    # Importing the task (its top level) has a limit of its own within timeout_s:
    # a task that loops or downloads at import fails in a minute, not in five.
    import_timeout_s: Annotated[float, POSITIVE] = 60.0
    # CUDA builds run ahead, in their own process with this limit, so a cold
    # nvcc build never eats into the candidate's own wall-clock limit.
    build_timeout_s: Annotated[float, POSITIVE] = 900.0
    output_limit_bytes: Annotated[int, POSITIVE] = 16 << 20
    # Also check at other sizes of the task (its size constants perturbed):
    # a kernel silently wrong at another size must not pass cleanly.
    vary_shapes: bool = True
    # Judge the backward too (a task can ask with `backward = True` in its file):
    # gradients of every floating input and parameter against the reference's,
    # and the candidate's own kernels must compute them.
    backward: bool = False
    shrink_on_cpu: bool = True
    time_candidates: bool = True
    isolate_network: bool = True  # children run in an empty network namespace where allowed
    timing: TimingConfig = field(default_factory=TimingConfig)

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def dtype_name(self) -> str:
        return PRECISIONS[self.precision]

    def evolve(self, **changes) -> "EvalConfig":
        return replace(self, **changes)


def tolerances(dtype_name: str, task_atol: float | None = None, task_rtol: float | None = None,
               config: EvalConfig | None = None) -> tuple[float, float]:
    """(atol, rtol) for one output: the run's override, else the task's, else the dtype's.

    The one rule: the judge's checks, the oracle's, the prompt's statement of
    them and `kernelevo.apply`'s verification all ask it.
    """
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(dtype_name, (1e-4, 1e-4))
    run_atol, run_rtol = (config.atol, config.rtol) if config is not None else (None, None)
    atol = run_atol if run_atol is not None else (task_atol or default_atol)
    rtol = run_rtol if run_rtol is not None else (task_rtol or default_rtol)
    return float(atol), float(rtol)
