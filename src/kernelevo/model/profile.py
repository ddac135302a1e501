"""Where a model's time goes: its forward under torch.profiler, ranked by submodule.

Every submodule's forward is wrapped in a `record_function` range by module
hooks; a range's time includes its children (inclusive), and a submodule's
self time is what its children leave. On a GPU the time is device time (CUDA
activities); without one it is CPU time, and the profile says which.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from kernelevo.model.contract import BuiltModel, build_model, device_for, dtype_of, \
    model_file, moved

RANGE_PREFIX = "kernelevo.module::"
ROOT = "<model>"


@dataclass(frozen=True)
class InputSpec:
    """One positional input as first seen: shape, dtype and value range."""

    shape: tuple[int, ...]
    dtype: str  # "float32", "int64", ...
    min: float
    max: float
    mean: float
    std: float


@dataclass(frozen=True)
class ModuleStat:
    """One submodule's share of a forward, with what an extracted task needs of it."""

    path: str
    type_name: str
    inputs: tuple[InputSpec, ...]
    calls_per_forward: int
    time_ms: float  # inclusive, per forward
    self_ms: float
    share: float  # of the whole forward's time
    extractable: bool
    why_not: str = ""
    params: tuple[tuple[str, tuple[int, ...]], ...] = ()
    extra_repr: str = ""

    @property
    def signature(self) -> tuple[Any, ...]:
        """What makes two submodules one task: type, settings, weights' shapes, inputs."""
        shapes = tuple((s.shape, s.dtype) for s in self.inputs)
        return (self.type_name, self.extra_repr, tuple(p[1] for p in self.params), shapes)


@dataclass(frozen=True)
class ModelProfile:
    """A ranked profile of one model's forward."""

    model_path: str
    seed: int
    activity: str  # "cuda" (device time) or "cpu" (CPU time)
    device: str
    precision: str
    repeats: int
    total_ms: float
    modules: tuple[ModuleStat, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelProfile":
        modules = tuple(_stat_from_dict(m) for m in data["modules"])
        return cls(**{**data, "modules": modules})


def _stat_from_dict(data: dict[str, Any]) -> ModuleStat:
    inputs = tuple(InputSpec(**{**s, "shape": tuple(s["shape"])}) for s in data["inputs"])
    params = tuple((name, tuple(shape)) for name, shape in data["params"])
    return ModuleStat(**{**data, "inputs": inputs, "params": params})


def profile_model(path: str, *, seed: int = 42, device: str | None = None,
                  precision: str = "fp32", repeats: int = 3) -> ModelProfile:
    """Build the model in `path` and profile `repeats` forwards after one warm-up."""
    device = device_for(device)
    built = moved(build_model(model_file(path, seed)), device, dtype_of(precision))
    return profile_built(built, device=device, precision=precision, repeats=repeats)


def profile_built(built: BuiltModel, *, device: str, precision: str,
                  repeats: int = 3) -> ModelProfile:
    """Profile an already built model (see profile_model)."""
    seen = _capture(built)
    times_us = _timed_ranges(built, repeats, activity="cuda" if device == "cuda" else "cpu")
    total_ms = times_us.get(ROOT, 0.0) / 1000 / repeats
    inclusive = {path: times_us.get(path, 0.0) / 1000 / repeats for path in seen}
    stats = [_stat(path, built.module.get_submodule(path), seen[path], inclusive, total_ms)
             for path in seen]
    stats.sort(key=lambda s: s.time_ms, reverse=True)
    return ModelProfile(str(built.file.path), built.file.seed,
                        "cuda" if device == "cuda" else "cpu", device, precision, repeats,
                        total_ms, tuple(stats))


@dataclass
class _Seen:
    """What hooks saw of one submodule in one forward."""

    calls: int = 0
    inputs: tuple[InputSpec, ...] = ()
    why_not: str = ""


def _capture(built: BuiltModel) -> dict[str, _Seen]:
    """One forward with hooks: each submodule's calls, first inputs and whether it extracts."""
    import torch

    seen: dict[str, _Seen] = {}
    handles = []
    for path, sub in built.module.named_modules():
        if path:
            seen[path] = _Seen()
            handles.append(sub.register_forward_hook(_recorder(seen[path]), with_kwargs=True))
    try:
        with torch.no_grad():
            built.module(*built.inputs)
    finally:
        for handle in handles:
            handle.remove()
    return {path: s for path, s in seen.items() if s.calls}


def _recorder(slot: _Seen) -> Callable[..., None]:
    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        slot.calls += 1
        if slot.calls == 1:
            slot.why_not = _why_not_extractable(args, kwargs, output)
            if not slot.why_not:
                slot.inputs = tuple(input_spec(x) for x in args)
    return hook


def _why_not_extractable(args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> str:
    import torch

    if kwargs:
        return f"called with keyword arguments {sorted(kwargs)}"
    if not args:
        return "called without inputs"
    if not all(isinstance(x, torch.Tensor) for x in args):
        kinds = sorted({type(x).__name__ for x in args if not isinstance(x, torch.Tensor)})
        return f"takes non-tensor inputs ({', '.join(kinds)})"
    if not isinstance(output, torch.Tensor):
        return f"returns {type(output).__name__}, not one tensor"
    return ""


def input_spec(tensor: Any) -> InputSpec:
    values = tensor.detach().double()
    if values.numel() == 0:
        return InputSpec(tuple(tensor.shape), _dtype_name(tensor.dtype), 0.0, 0.0, 0.0, 0.0)
    std = float(values.std()) if values.numel() > 1 else 0.0
    return InputSpec(tuple(tensor.shape), _dtype_name(tensor.dtype), float(values.min()),
                     float(values.max()), float(values.mean()), std)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _timed_ranges(built: BuiltModel, repeats: int, activity: str) -> dict[str, float]:
    """Microseconds in each submodule's range over `repeats` forwards, by path."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if activity == "cuda"
                                           else [])
    handles = _range_hooks(built.module, record_function)
    try:
        with torch.no_grad():
            built.module(*built.inputs)  # warm-up: lazy inits and caches out of the profile
            _sync(activity)
            with profile(activities=activities) as prof:
                for _ in range(repeats):
                    with record_function(RANGE_PREFIX + ROOT):
                        built.module(*built.inputs)
                _sync(activity)
    finally:
        for handle in handles:
            handle.remove()
    return _range_totals(prof.key_averages(), activity)


def _range_hooks(model: Any, record_function: Any) -> list[Any]:
    open_ranges: list[Any] = []

    def enter(path: str) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            scope = record_function(RANGE_PREFIX + path)
            scope.__enter__()
            open_ranges.append(scope)
        return hook

    def leave(module: Any, args: Any, output: Any) -> None:
        if open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    handles = []
    for path, sub in model.named_modules():
        if path:
            handles.append(sub.register_forward_pre_hook(enter(path)))
            handles.append(sub.register_forward_hook(leave))
    return handles


def _range_totals(events: Any, activity: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for event in events:
        if not event.key.startswith(RANGE_PREFIX):
            continue
        if activity == "cuda":
            # The CPU range and its GPU annotation share the name; either carries device time.
            value = float(getattr(event, "device_time_total", 0.0)
                          or getattr(event, "cuda_time_total", 0.0))
        else:
            value = float(event.cpu_time_total)
        path = event.key[len(RANGE_PREFIX):]
        totals[path] = max(totals.get(path, 0.0), value)
    return totals


def _sync(activity: str) -> None:
    import torch

    if activity == "cuda":
        torch.cuda.synchronize()


def _stat(path: str, sub: Any, seen: _Seen, inclusive: dict[str, float],
          total_ms: float) -> ModuleStat:
    children = [p for p in inclusive if _parent(p) == path]
    own_ms = inclusive[path]
    self_ms = max(0.0, own_ms - sum(inclusive[c] for c in children))
    params = tuple((name, tuple(t.shape)) for name, t in
                   list(sub.named_parameters()) + list(sub.named_buffers()))
    return ModuleStat(path, type(sub).__name__, seen.inputs, seen.calls, own_ms, self_ms,
                      own_ms / total_ms if total_ms else 0.0, not seen.why_not,
                      seen.why_not, params, sub.extra_repr())


def _parent(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else ""


def profile_table(profile: ModelProfile, limit: int = 20) -> list[list[str]]:
    """Rows for a table: rank, path, type, inputs, time, share, self, calls, extractable."""
    unit = "GPU ms" if profile.activity == "cuda" else "CPU ms"
    rows = [["#", "module", "type", "inputs", unit, "share", "self ms", "calls", "task?"]]
    for rank, stat in enumerate(profile.modules[:limit], 1):
        shapes = " ".join(f"{_shape(s.shape)}:{s.dtype}" for s in stat.inputs) or "-"
        rows.append([str(rank), stat.path, stat.type_name, shapes, f"{stat.time_ms:.3f}",
                     f"{stat.share:.1%}", f"{stat.self_ms:.3f}", str(stat.calls_per_forward),
                     "yes" if stat.extractable else f"no: {stat.why_not}"])
    return rows


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(n) for n in shape) or "scalar"
