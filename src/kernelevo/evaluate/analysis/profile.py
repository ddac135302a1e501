"""A timed candidate's profile: where its GPU time goes, its roofline position, a diagnosis.

The worker takes it after timing (never during: a profiler changes what it
watches), from torch.profiler's trace of a few annotated calls. Parsing the
trace is a pure function of its events (`breakdown`), so it is tested on
CPU traces, whose operator events stand in for kernels. The record
(`Profile`) travels as a plain dict in the judge's messages, the verdict,
`run.db` and `--json`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable

from kernelevo.evaluate.analysis.roofline import Roofline, roofline, unknown_device_note

CALL_ANNOTATION = "kernelevo::call"
GPU_KERNEL_CATEGORIES = ("kernel",)
CPU_STAND_IN_CATEGORIES = ("cpu_op",)
NO_GPU_NOTE = "no GPU: kernel breakdown not available"
# Diagnosis thresholds: the share of a call spent outside kernels that makes it
# launch-bound, and the kernel time under which a call that is far from its
# ceiling is latency-bound (too little work to fill the GPU).
LAUNCH_BOUND_SHARE = 0.5
LATENCY_BOUND_US = 10.0
LATENCY_BOUND_FRACTION = 0.3


COUNTING_RULE = ("FLOPs: matmul/conv/attention by torch's FlopCounterMode; other ops 1 per "
                 "output element (pointwise), 1 per input element (reductions), softmax 5 and "
                 "norms 7 per input element")


@dataclass(frozen=True)
class Cost:
    """Bytes and FLOPs of one reference call; FLOPs split by the unit that does them."""

    bytes_moved: int
    matmul_flops: int  # by FlopCounterMode: matrix units' work
    other_flops: int  # pointwise, reductions, norms: CUDA cores' work
    device: str = "meta"  # where the reference ran to count them

    @property
    def flops(self) -> int:
        return self.matmul_flops + self.other_flops

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes_moved if self.bytes_moved else 0.0


@dataclass(frozen=True)
class TraceEvent:
    """One complete event of a trace, times in microseconds."""

    name: str
    category: str
    start_us: float
    duration_us: float
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    registers: int | None = None
    shared_bytes: int | None = None


@dataclass(frozen=True)
class KernelRow:
    """One kernel (by name) of a profiled call: its share of GPU kernel time and launches."""

    name: str
    share: float
    us_per_call: float
    launches_per_call: float
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    registers: int | None = None
    shared_bytes: int | None = None
    own: bool = False


@dataclass(frozen=True)
class Breakdown:
    """Kernels of one call, busiest first, and the time of the call outside them."""

    kernels: tuple[KernelRow, ...]
    kernel_us_per_call: float
    outside_us_per_call: float
    calls: int

    @property
    def launches_per_call(self) -> float:
        return sum(row.launches_per_call for row in self.kernels)

    @property
    def outside_share(self) -> float:
        total = self.kernel_us_per_call + self.outside_us_per_call
        return self.outside_us_per_call / total if total > 0 else 0.0


@dataclass(frozen=True)
class NcuKernel:
    """Nsight Compute's fixed metric set for one kernel launch (percents 0..100)."""

    name: str
    metrics: dict[str, float] = field(default_factory=dict)
    stalls: tuple[tuple[str, float], ...] = ()  # top warp-stall reasons, cycles per issue


@dataclass(frozen=True)
class Profile:
    """What a candidate's profile says; everything optional but the notes."""

    breakdown: Breakdown | None = None
    cost: Cost | None = None
    roofline: Roofline | None = None
    diagnosis: str = ""
    baseline_launches: dict[str, float] = field(default_factory=dict)  # eager, compile
    ncu: tuple[NcuKernel, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        """The inverse of to_dict, also after a JSON round trip (lists for tuples)."""
        return cls(
            breakdown=_breakdown(data.get("breakdown")),
            cost=Cost(**data["cost"]) if data.get("cost") else None,
            roofline=Roofline(**data["roofline"]) if data.get("roofline") else None,
            diagnosis=data.get("diagnosis", ""),
            baseline_launches=dict(data.get("baseline_launches", {})),
            ncu=tuple(NcuKernel(k["name"], dict(k.get("metrics", {})),
                                tuple((s, v) for s, v in k.get("stalls", ())))
                      for k in data.get("ncu", ())),
            notes=tuple(data.get("notes", ())))

    @property
    def bound(self) -> str:
        """The bound type the diagnosis names: memory, compute, launch, latency or ''."""
        return self.diagnosis.split("-bound", 1)[0] if "-bound" in self.diagnosis else ""


def _breakdown(data: dict[str, Any] | None) -> Breakdown | None:
    if not data:
        return None
    rows = []
    for row in data["kernels"]:
        row = dict(row)
        row["grid"], row["block"] = tuple(row.get("grid", ())), tuple(row.get("block", ()))
        rows.append(KernelRow(**{f.name: row[f.name] for f in fields(KernelRow) if f.name in row}))
    return Breakdown(tuple(rows), data["kernel_us_per_call"], data["outside_us_per_call"],
                     data["calls"])


# Parsing a trace -----------------------------------------------------------------------

def events_from_chrome_trace(trace: dict[str, Any]) -> list[TraceEvent]:
    """Complete ('X') events of a chrome trace as torch.profiler exports it."""
    events = []
    for raw in trace.get("traceEvents", []):
        if raw.get("ph") != "X" or "dur" not in raw:
            continue
        args = raw.get("args", {}) or {}
        events.append(TraceEvent(
            name=str(raw.get("name", "")), category=str(raw.get("cat", "")),
            start_us=float(raw.get("ts", 0.0)), duration_us=float(raw["dur"]),
            grid=tuple(int(v) for v in args.get("grid", ()) or ()),
            block=tuple(int(v) for v in args.get("block", ()) or ()),
            registers=_int_or_none(args.get("registers per thread")),
            shared_bytes=_int_or_none(args.get("shared memory"))))
    return events


def breakdown(events: Iterable[TraceEvent], own_names: Iterable[str] = (),
              kernel_categories: tuple[str, ...] = GPU_KERNEL_CATEGORIES) -> Breakdown:
    """Kernels per call from the events of annotated calls (CALL_ANNOTATION spans).

    The calls' window is the union of the annotations, each of which ends
    with a synchronisation; the time outside kernels is that window less the
    union of the kernels' intervals (launch gaps, host work, waiting).
    """
    events = list(events)
    windows = [(e.start_us, e.start_us + e.duration_us) for e in events
               if e.name == CALL_ANNOTATION and e.category != "gpu_user_annotation"]
    calls = max(1, len(windows))
    kernels = [e for e in events if e.category in kernel_categories]
    if windows:
        kernels = [e for e in kernels if any(a <= e.start_us < b for a, b in windows)]
    total_us = sum(e.duration_us for e in kernels)
    busy_us = _union_us([(e.start_us, e.start_us + e.duration_us) for e in kernels])
    window_us = _union_us(windows) if windows else busy_us
    names = tuple(own_names)
    rows = []
    for name, group in _grouped(kernels).items():
        spent = sum(e.duration_us for e in group)
        first = group[0]
        rows.append(KernelRow(name=name[:160], share=spent / total_us if total_us else 0.0,
                              us_per_call=spent / calls, launches_per_call=len(group) / calls,
                              grid=first.grid, block=first.block, registers=first.registers,
                              shared_bytes=first.shared_bytes,
                              own=any(own and own in name for own in names)))
    rows.sort(key=lambda row: -row.us_per_call)
    return Breakdown(tuple(rows), busy_us / calls, max(0.0, window_us - busy_us) / calls, calls)


def _grouped(events: list[TraceEvent]) -> dict[str, list[TraceEvent]]:
    groups: dict[str, list[TraceEvent]] = {}
    for event in events:
        groups.setdefault(event.name, []).append(event)
    return groups


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


# Judging it ----------------------------------------------------------------------------

def build_profile(parts: Breakdown | None, cost: Cost | None, gpu_time_ms: float | None,
                  device_name: str, dtype_name: str,
                  baseline_launches: dict[str, float] | None = None,
                  notes: tuple[str, ...] = ()) -> Profile:
    """A profile from its parts: the roofline of the GPU time and a diagnosis of it all."""
    position = None
    if cost is not None and gpu_time_ms:
        position = roofline(gpu_time_ms, cost.bytes_moved, cost.matmul_flops, cost.other_flops,
                            device_name, dtype_name)
        if position is None:
            notes = notes + (unknown_device_note(device_name),)
    if parts is None and NO_GPU_NOTE not in notes:
        notes = notes + (NO_GPU_NOTE,)
    launches = dict(baseline_launches or {})
    return Profile(parts, cost, position, diagnose(parts, position, launches), launches, (),
                   notes)


def diagnose(parts: Breakdown | None, position: Roofline | None,
             baseline_launches: dict[str, float]) -> str:
    """One line naming the bound and the numbers behind it ('' with nothing to go on)."""
    line = ""
    if parts is not None and parts.calls and parts.outside_share >= LAUNCH_BOUND_SHARE:
        line = (f"launch-bound: {pct(parts.outside_share)} of a call "
                f"({parts.outside_us_per_call:.1f} of "
                f"{parts.outside_us_per_call + parts.kernel_us_per_call:.1f} us) is outside "
                f"kernels, {parts.launches_per_call:g} launches per call")
    elif (parts is not None and position is not None
          and 0 < parts.kernel_us_per_call < LATENCY_BOUND_US
          and position.fraction < LATENCY_BOUND_FRACTION):
        line = (f"latency-bound: {parts.kernel_us_per_call:.1f} us of kernels per call at "
                f"{pct(position.fraction)} of the {position.bound} ceiling: too little work "
                "per launch to fill the GPU")
    elif position is not None:
        line = position.sentence()
    if not line:
        return ""
    compiled = baseline_launches.get("compile")
    if parts is not None and compiled and parts.launches_per_call > compiled:
        line += (f"; {parts.launches_per_call:g} kernels where the reference fuses to "
                 f"{compiled:g} under torch.compile")
    return line


# Text ----------------------------------------------------------------------------------

def summary_line(profile: Profile | None) -> str:
    """A few words for an inspiration's one-line summary."""
    if profile is None or not profile.diagnosis:
        return ""
    return profile.diagnosis.split(";")[0]


def prompt_lines(profile: Profile, top: int = 3) -> list[str]:
    """The compact section the model sees for a parent (at most top+3 short lines)."""
    lines = []
    if profile.diagnosis:
        lines.append(f"bottleneck: {profile.diagnosis}")
    position = profile.roofline
    if position is not None:
        lines.append(f"roofline: {position.achieved_gbps:.0f} GB/s of {position.peak_gbps:.0f} "
                     f"({pct(position.memory_fraction)}), {position.achieved_tflops:.2f} TFLOP/s "
                     f"({pct(position.compute_fraction)} of compute), "
                     f"{position.bytes_moved / 1e6:.1f} MB and "
                     f"{position.flops / 1e9:.2f} GFLOP per call")
    parts = profile.breakdown
    if parts is not None and parts.kernels:
        lines.append(f"kernels per call: {parts.launches_per_call:g} launches, "
                     f"{parts.kernel_us_per_call:.1f} us in kernels, "
                     f"{parts.outside_us_per_call:.1f} us outside")
        for row in parts.kernels[:top]:
            lines.append(f"  {row.name[:70]}{' (own)' if row.own else ''}: {pct(row.share)}, "
                         f"{row.us_per_call:.1f} us, x{row.launches_per_call:g}"
                         + (f", grid {_dims(row.grid)} block {_dims(row.block)}"
                            if row.grid else ""))
    lines.extend(f"profile note: {note}" for note in profile.notes[:1])
    return lines


def table_lines(profile: Profile, full: bool = False) -> list[str]:
    """The profile as text for a terminal: short for eval, full for `kernelevo profile`."""
    lines = prompt_lines(profile, top=50 if full else 5)
    if full and profile.cost is not None:
        lines.append(f"cost: {profile.cost.bytes_moved:,} bytes, {profile.cost.matmul_flops:,} "
                     f"matmul FLOPs, {profile.cost.other_flops:,} other FLOPs ({COUNTING_RULE})")
    if full and profile.baseline_launches:
        lines.append("baseline launches per call: " + ", ".join(
            f"{name} {count:g}" for name, count in profile.baseline_launches.items()))
    if full:
        for kernel in profile.ncu:
            metrics = ", ".join(f"{k} {v:g}" for k, v in kernel.metrics.items())
            stalls = ", ".join(f"{k} {v:.2f}" for k, v in kernel.stalls)
            lines.append(f"ncu {kernel.name[:70]}: {metrics}"
                         + (f"; top stalls: {stalls}" if stalls else ""))
        lines.extend(f"note: {note}" for note in profile.notes[1:])
    return lines


def pct(fraction: float) -> str:
    """A fraction as the project writes percents: '41 %'."""
    return f"{fraction * 100:.0f} %"


def _dims(values: tuple[int, ...]) -> str:
    return "x".join(str(v) for v in values) if values else "?"


# Attaching it to a verdict ---------------------------------------------------------------

def timed_profile(share: dict[str, Any]) -> Profile | None:
    """The profile the worker sent beside a candidate's kernel share, if it sent one."""
    raw = share.get("profile") if share else None
    return Profile.from_dict(raw) if raw else None


def untimed_profile(device: str) -> Profile | None:
    """The profile of a verdict judged without timing: on CPU it says why there is none."""
    return Profile(notes=(NO_GPU_NOTE,)) if device == "cpu" else None
