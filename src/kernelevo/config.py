"""Settings of an evaluation, one typed tree shared by eval, compare and evolve."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kernelevo.errors import ConfigError

PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
POLICIES = ("strict", "default", "permissive")
TIMING_MEASURES = ("gpu", "call", "kernelbench")
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

    warmup_ms: float = 50.0
    target_ms: float = 300.0  # measured time wanted per contestant
    min_samples: int = 20
    max_samples: int = 200
    cuda_graph: bool = False
    baselines: tuple[str, ...] = ("eager", "compile")
    # The measure that speedups and the search's fitness use: gpu (device time
    # per call, as do_bench), call (host time per call in a back-to-back loop)
    # or kernelbench (KernelBench's harness protocol).
    measure: str = "gpu"
    call_loop_ms: float = 2.0  # length of one loop of back-to-back calls
    call_target_ms: float = 100.0  # call-time loops wanted per contestant, in all

    def __post_init__(self) -> None:
        if self.measure not in TIMING_MEASURES:
            raise ConfigError(f"timing measure {self.measure!r}: use one of "
                              f"{', '.join(TIMING_MEASURES)}")
        unknown = set(self.baselines) - {"eager", "compile"}
        if unknown:
            raise ConfigError(f"unknown baselines {sorted(unknown)}: use eager and/or compile")
        for name in ("warmup_ms", "target_ms", "call_loop_ms", "call_target_ms"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"timing {name}={getattr(self, name)}: it must be positive")


@dataclass(frozen=True)
class EvalConfig:
    """Everything that decides a verdict; the same object serves every command."""

    device: str = "auto"  # auto | cuda | cpu
    precision: str = "fp32"
    input_sets: int = 3
    atol: float | None = None
    rtol: float | None = None
    policy: str = "default"
    static_checks: bool = True
    timeout_s: float = 300.0
    # CUDA builds run ahead, in their own process with this limit, so a cold
    # nvcc build never eats into the candidate's own wall-clock limit.
    build_timeout_s: float = 900.0
    output_limit_bytes: int = 16 << 20
    vary_shapes: bool = False
    shrink_on_cpu: bool = True
    time_candidates: bool = True
    isolate_network: bool = True  # children run in an empty network namespace where allowed
    timing: TimingConfig = field(default_factory=TimingConfig)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r}: use one of {', '.join(PRECISIONS)}")
        if self.policy not in POLICIES:
            raise ConfigError(f"policy {self.policy!r}: use one of {', '.join(POLICIES)}")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ConfigError(f"device {self.device!r}: use auto, cuda or cpu")
        for name in ("timeout_s", "build_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)}: a time limit must be positive")
        if self.input_sets < 2:
            raise ConfigError(f"input_sets={self.input_sets}: at least 2 sets are needed")
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{name}={value}: tolerances must be positive")

    @property
    def dtype_name(self) -> str:
        return PRECISIONS[self.precision]

    def evolve(self, **changes) -> "EvalConfig":
        return replace(self, **changes)


def tolerances(dtype_name: str, task_atol: float | None, task_rtol: float | None,
               config: EvalConfig) -> tuple[float, float]:
    """(atol, rtol) for one output: the run's override, else the task's, else the dtype's."""
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(dtype_name, (1e-4, 1e-4))
    atol = config.atol if config.atol is not None else (task_atol or default_atol)
    rtol = config.rtol if config.rtol is not None else (task_rtol or default_rtol)
    return float(atol), float(rtol)


def load_eval_config(path: str | None, **overrides) -> EvalConfig:
    """An EvalConfig from a TOML file's [eval] table, then flags given as overrides."""
    values: dict = {}
    if path:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
            import tomli as tomllib  # type: ignore[no-redef]

        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from exc
        values = dict(data.get("eval", {}))
    timing_values = dict(values.pop("timing", {}))
    known = set(EvalConfig.__dataclass_fields__) - {"timing"}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"unknown [eval] settings {sorted(unknown)} in {path}: "
                          f"known ones are {sorted(known)}")
    for key, value in overrides.items():
        if value is None:
            continue
        if key in TimingConfig.__dataclass_fields__:
            timing_values[key] = value
        else:
            values[key] = value
    if "baselines" in timing_values:
        timing_values["baselines"] = tuple(timing_values["baselines"])
    try:
        timing = TimingConfig(**timing_values)
    except TypeError as exc:
        raise ConfigError(f"bad [eval.timing] settings: {exc}") from exc
    return EvalConfig(timing=timing, **values)
