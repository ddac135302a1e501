"""What the judge and its children say to each other: one frozen dataclass per kind.

A child's message crosses the pipe as one JSON object, `{"kind": ..., **fields}`
(`sandbox.pipe.Channel`); a reply to an `ask` is a JSON object of its fields.
A child's start is a job (`OracleJob`, `WorkerJob`, `PrebuildJob`), handed
over as a plain dict. `decode(data, kinds)` turns what arrived into its
dataclass, or raises a `MessageError` naming the kind and the field that is
wrong; every field is checked against its declared type on the way in.
The same `kind` can mean different messages from different senders (an
oracle's `done` carries the reference's metadata, a worker's nothing), so
each receiver decodes with its own table: `ORACLE_KINDS`, `WORKER_KINDS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from kernelevo.config import TimingConfig
from kernelevo.errors import ConfigError, MessageError
from kernelevo.schema import check_value, field_hints, settings_from_dict, settings_to_dict

Decoded = TypeVar("Decoded", bound="Message")


@dataclass(frozen=True)
class Message:
    """Fields of one message; `kind` names it on the pipe (a job or a reply has none)."""

    kind: ClassVar[str] = ""

    def fields_json(self) -> dict[str, Any]:
        """The fields as JSON values; an unset optional field (None) is left out, as before."""
        data = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if value is None and item.default is None:
                continue
            data[item.name] = settings_to_dict(value) if dataclasses.is_dataclass(value) else value
        return data

    def to_json(self) -> dict[str, Any]:
        """The whole message as it goes on the pipe."""
        return {"kind": self.kind, **self.fields_json()} if self.kind else self.fields_json()

    @classmethod
    def from_json(cls: type[Decoded], data: Any) -> Decoded:
        """The message from decoded JSON; a MessageError names what is missing or wrong."""
        name = cls.kind or cls.__name__
        if not isinstance(data, dict):
            raise MessageError(f"a {name} message must be a JSON object, not "
                               f"{type(data).__name__}")
        if cls.kind and data.get("kind") != cls.kind:
            raise MessageError(f"a {name} message came with kind {data.get('kind')!r}")
        hints = field_hints(cls)
        unknown = sorted(set(data) - set(hints) - {"kind"})
        if unknown:
            raise MessageError(f"a {name} message has unknown fields {', '.join(unknown)}: "
                               "the sender and the judge are of different versions")
        values = {}
        for item in dataclasses.fields(cls):
            if item.name not in data:
                if item.default is dataclasses.MISSING \
                        and item.default_factory is dataclasses.MISSING:
                    raise MessageError(f"a {name} message lacks its field {item.name}")
                continue
            values[item.name] = _field(name, item.name, hints[item.name], data[item.name])
        return cls(**values)


def _field(message: str, name: str, hint: Any, value: Any) -> Any:
    try:
        if hint is TimingConfig:  # the judge's settings, by their one codec
            return settings_from_dict(TimingConfig, value)
        return check_value(hint, value)
    except ConfigError as exc:
        raise MessageError(f"a {message} message's field {name}: {exc}") from None


# --- jobs: what a child starts with ------------------------------------------------------------


@dataclass(frozen=True)
class OracleJob(Message):
    """The reference oracle's work: the task, where it runs, the seeds and stress scales."""

    task_source: str
    device: str
    dtype: str
    scratch: str
    seeds: tuple[int, ...]
    variants: tuple[float | None, ...]  # None for the task's own distribution
    task_folder: str = ""
    task_path: str = ""  # the user's file, named in the task's tracebacks ("" for source text)
    backward: bool = False  # gradients too (gradients.py): of every floating input and parameter
    # The run's --atol and --rtol (None where not given): config.tolerances' rule
    # holds in the oracle's own checks too.
    atol: float | None = None
    rtol: float | None = None


@dataclass(frozen=True)
class WorkerJob(Message):
    """The worker's work: the task and the judge's settings; the rest comes with `ReadyReply`."""

    task_source: str
    device: str
    dtype: str
    scratch: str
    time: bool
    timing: TimingConfig
    task_folder: str = ""
    # Untimed, calls on rotated input sets stand in for timing (worker_timing.py,
    # rotation_check). A re-check at other sizes leaves them out: the evaluation
    # it re-checks timed the candidate, or rotated its inputs, at the task's sizes.
    rotation: bool = True
    # Forward and backward calls with grad too (worker_backward.py), on the same seeds.
    backward: bool = False


@dataclass(frozen=True)
class PrebuildJob(Message):
    """A CUDA candidate's source to build (or compile-check) with no GPU visible."""

    source: str
    scratch: str


# --- from any child ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Isolation(Message):
    """First from every child (sent by the sandbox): its network and confinement layers."""

    kind: ClassVar[str] = "isolation"
    network: str = "unknown"
    layers: tuple[str, ...] = ()
    # The child's start (wall clock, time.time()): when its code first ran after
    # the fork, when the forkserver it came from had finished its imports (0:
    # unknown), and the seconds its sandbox then took to set up.
    started_at: float = 0.0
    preloaded_at: float = 0.0
    setup_s: float = 0.0


@dataclass(frozen=True)
class Gpu(Message):
    """(ask) About to run kernels: answered with `Granted` once a shared hold is taken.

    `brief`: a few short kernels only (a model's parameters and inputs made),
    so a standby asking need not wait for the evaluation beside it to time.
    """

    kind: ClassVar[str] = "gpu"
    brief: bool = False


@dataclass(frozen=True)
class CpuWork(Message):
    """(ask) A warm-up's CPU-only stretch (torch.compile's compile) ahead: the hold may go.

    Heard only before the worker's `Ready`, while it runs the harness's code
    alone: a candidate's process cannot drop its GPU hold.
    """

    kind: ClassVar[str] = "cpu_work"


@dataclass(frozen=True)
class Progress(Message):
    """A phase for the progress line (of one candidate, where it names one)."""

    kind: ClassVar[str] = "progress"
    phase: str = ""
    candidate: int | None = None


@dataclass(frozen=True)
class Garbage(Message):
    """What the sandbox records for bytes on the pipe that were no JSON object."""

    kind: ClassVar[str] = "garbage"


# --- from the oracle ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference(Message):
    """(ask) The reference outputs, as a transfer bundle: answered once imported."""

    kind: ClassVar[str] = "reference"
    bundle: dict[str, Any]


@dataclass(frozen=True)
class OracleDone(Message):
    """The oracle's last word: which sets it kept and what it learnt about the reference."""

    kind: ClassVar[str] = "done"
    kept_sets: tuple[int, ...]
    variants_used: tuple[float | None, ...]
    stress: dict[str, str]  # kept set's index (a string in JSON) -> how it was made
    structure: str
    ops: tuple[str, ...]
    flops: float
    bytes: float
    output_dtypes: tuple[str, ...]
    passthrough: tuple[str, ...] = ()
    atol: float | None = None
    rtol: float | None = None
    # With the backward judged: the gradients' names (`input 0`, `parameter ln.weight`),
    # dtypes, the kept sets whose gradients are sent (a stress set where the reference's
    # own gradients are unsure is left out), the task's gradient tolerances and the
    # reference's compute ops during backward.
    grad_names: tuple[str, ...] = ()
    grad_dtypes: tuple[str, ...] = ()
    grad_sets: tuple[int, ...] = ()
    grad_atol: float | None = None
    grad_rtol: float | None = None
    backward_ops: tuple[str, ...] = ()
    # With the backward judged and the task not in float64: per gradient, the reference's
    # own error against the same model's float64 gradients over the judged sets (its
    # largest relative L2 error and share of elements outside the tolerance; None where
    # not measured), whether it failed the elementwise test itself on any of them, and
    # why nothing was measured (its float64 run failed), if so.
    grad_float64_l2: tuple[float | None, ...] = ()
    grad_float64_mismatch: tuple[float | None, ...] = ()
    grad_float64_failed: tuple[bool, ...] = ()
    grad_float64_problem: str = ""
    # Floating parameters and buffers the task builds with one value throughout
    # (`ln.weight (all 1)`): a kernel that ignores them passes (inputs.constant_tensors).
    constant_tensors: tuple[str, ...] = ()
    # The most GPU memory its allocator held at once, in bytes (inputs.peak_gpu_bytes)
    peak_bytes: int = 0


@dataclass(frozen=True)
class TaskFailed(Message):
    """Why the task itself is broken (the oracle's last word instead of `OracleDone`)."""

    kind: ClassVar[str] = "task_error"
    message: str = "the reference failed"


# --- from the worker ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready(Message):
    """(ask) Warm, waiting for candidates: answered with `ReadyReply` or `Abort`."""

    kind: ClassVar[str] = "ready"
    warmup: dict[str, float] = field(default_factory=dict)  # seconds by warm-up step
    imported: tuple[str, ...] = ()  # modules the warm-up imported, for the next forkserver


@dataclass(frozen=True)
class StoredBaselines(Message):
    """(ask) Baselines warm, no candidate loaded yet: are their times stored for the task?

    Answered with `BaselinesReply`: the stored times, or word to time them
    now (the GPU held alone for it) and send them with `BaselineTimes`.
    """

    kind: ClassVar[str] = "stored_baselines"


@dataclass(frozen=True)
class BaselineTimes(Message):
    """(ask) The baselines' times, by measure, taken before any candidate loaded: answered
    once stored (the GPU shared again)."""

    kind: ClassVar[str] = "baseline_times"
    measures: dict[str, dict[str, dict[str, Any]]]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Failed(Message):
    """(ask) A candidate would not build, load or run: a named reason and its log."""

    kind: ClassVar[str] = "failed"
    candidate: int
    reason: str
    message: str
    failed_after_s: float = 0.0  # from the start of the step that failed to its failure
    build_s: float = 0.0  # of which nvcc and the linker (a CUDA candidate's build)


@dataclass(frozen=True)
class CheckedCandidate(Message):
    """(ask) A candidate's outputs (a bundle) and what the guards saw; answered once decided."""

    kind: ClassVar[str] = "checked_candidate"
    candidate: int
    bundle: dict[str, Any]
    structures: dict[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # "reason: detail" of per-call guards that fired
    ops: tuple[str, ...] = ()  # PyTorch compute ops of the recorded call
    triton_launches: int = 0
    cuda_switchable: bool = False
    instrumented: int = 0
    uninstrumented: int = 0
    threads: tuple[Any, ...] = ()
    children: tuple[Any, ...] = ()
    files: tuple[Any, ...] = ()
    tampered: tuple[Any, ...] = ()
    rotation_problem: str | None = None
    setup_s: float = 0.0
    load_s: float = 0.0
    build_s: float = 0.0
    first_call_s: float = 0.0
    check_s: float = 0.0
    autotune_s: float = 0.0  # seconds @triton.autotune benchmarked configs
    autotune_measured: int = 0
    autotune_skipped: int = 0  # configs skipped once the budget was spent
    # With the backward judged (worker_backward.py): the gradients' names in the
    # candidate's own terms, the custom autograd.Function nodes its outputs'
    # graph reaches and their grad_fns, its Triton launches and PyTorch compute
    # ops during backward (and forward under grad), and why there are no
    # gradients (not differentiable, or its backward raised), if so.
    grad_names: tuple[str, ...] = ()
    custom_functions: tuple[str, ...] = ()
    grad_fns: tuple[str, ...] = ()
    backward_launches: int = 0
    backward_ops: tuple[str, ...] = ()
    grad_forward_ops: tuple[str, ...] = ()  # PyTorch compute ops of its forward under grad
    backward_problem: str | None = None
    backward_error: str | None = None


@dataclass(frozen=True)
class Checked(Message):
    """(ask) Every candidate checked: answered with `TimeThese`.

    `peak_bytes`: the most GPU memory the worker's allocator has held so far
    (0 where unknown), for a verdict that is not timed (a re-check at other sizes).
    """

    kind: ClassVar[str] = "checked"
    peak_bytes: int = 0


@dataclass(frozen=True)
class Timed(Message):
    """(ask) Timing done, profiling next: answered once the GPU may be shared again."""

    kind: ClassVar[str] = "timed"


@dataclass(frozen=True)
class HostQuiet(Message):
    """(ask) The worker's calls are about to be timed (`on`) or are timed: the judge's other
    jobs stand still meanwhile (sandbox/quiet.py). Answered with `QuietReply`."""

    kind: ClassVar[str] = "host_quiet"
    on: bool = True


@dataclass(frozen=True)
class Timing(Message):
    """What timing found: stats by measure and contestant, and what the judge should know."""

    kind: ClassVar[str] = "timing"
    measures: dict[str, dict[str, dict[str, Any]]]  # TimingStats fields by measure, contestant
    notes: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    inconsistent: dict[str, str] = field(default_factory=dict)  # candidate index -> problem
    shares: dict[str, dict[str, Any]] = field(default_factory=dict)  # own kernel shares
    compile_s: float | None = None
    timing_s: float = 0.0
    timing_steps: dict[str, float] = field(default_factory=dict)  # seconds: warm, per measure
    # How the baselines' times came: "beside" the candidates, from the task's
    # "stored" times (the probe steady), or beside them after the probe "drifted"
    baselines: str = "beside"
    drift: dict[str, float] = field(default_factory=dict)  # the probe's time over the stored
    stored_at: str = ""  # when the stored times were taken
    profile_s: float = 0.0
    backend: str = ""
    # the host's speed spread while the calls were timed (host_speed.spread), and
    # the probes' median in microseconds (0: none taken)
    host_spread: float = 0.0
    host_us: float = 0.0
    # the CPU core the timing ran on, in words (cores.core_words)
    timing_core: str = ""
    # candidate index -> measure -> baseline -> [low, high] of its speedup (timing.speedup_range)
    ranges: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    # With the backward judged: contestant -> how its backward alone was timed
    # ("replayed graph", or "train-forward": train minus forward with grad)
    backward_methods: dict[str, str] = field(default_factory=dict)
    tampered: tuple[str, ...] = ()
    device_name: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    # The most GPU memory the worker's allocator held at once, checks and timing
    # included, in bytes: the worker's word (its candidate ran in it), for sizing only
    peak_bytes: int = 0


@dataclass(frozen=True)
class WorkerDone(Message):
    """The worker's last word: its work is done."""

    kind: ClassVar[str] = "done"


@dataclass(frozen=True)
class PrebuildDone(Message):
    """A prebuild's last word: whether the build worked, and how long it took."""

    kind: ClassVar[str] = "done"
    ok: bool
    build_s: float = 0.0
    wall_s: float = 0.0


@dataclass(frozen=True)
class CompileChecked(Message):
    """A compile-only check's last word: the verdict's reason and message, or None (nothing built)."""

    kind: ClassVar[str] = "done"
    reason: str | None = None
    message: str = ""
    wall_s: float = 0.0


ORACLE_KINDS: dict[str, type[Message]] = {
    m.kind: m for m in (Isolation, Gpu, Progress, Garbage, Reference, OracleDone, TaskFailed)}
WORKER_KINDS: dict[str, type[Message]] = {
    m.kind: m for m in (Isolation, Gpu, CpuWork, Progress, Garbage, StoredBaselines,
                        BaselineTimes, Ready, Failed, CheckedCandidate, Checked, Timed, HostQuiet,
                        Timing, WorkerDone)}
PREBUILD_KINDS: dict[str, type[Message]] = {
    m.kind: m for m in (Isolation, Garbage, PrebuildDone)}
COMPILE_CHECK_KINDS: dict[str, type[Message]] = {
    m.kind: m for m in (Isolation, Garbage, CompileChecked)}


def decode(data: Any, kinds: dict[str, type[Message]]) -> Message:
    """The message `data` is, by its kind in `kinds`; a MessageError for any other."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in kinds:
        raise MessageError(f"a message of kind {kind!r} is none of {', '.join(kinds)}: "
                           "the sender and the judge are of different versions")
    return kinds[kind].from_json(data)


class Sender:
    """A child's side of the pipe, typed: `sandbox.pipe.Channel` underneath."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel

    def send(self, message: Message) -> None:
        self.channel.send(message.kind, **message.fields_json())

    def ask(self, message: Message) -> dict[str, Any]:
        """Send and wait for the judge's reply (decoded by the caller: it knows its type)."""
        return self.channel.ask(message.kind, **message.fields_json())
