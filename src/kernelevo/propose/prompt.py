"""Prompts for LLM mutations: what the model sees of the task, the parent and its verdict.

Templates are data files in `kernelevo/prompts/`; a user directory may replace
any of them by name. Rendering is strict, so a template that names a missing
variable fails loudly instead of sending the model a silently blank prompt.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import jinja2

from kernelevo.candidate import BACKEND_REGISTRY
from kernelevo.config import PRECISIONS, tolerances
from kernelevo.errors import ConfigError
from kernelevo.evaluate.analysis.profile import Profile, prompt_lines, summary_line
from kernelevo.evaluate.verdict import (CONSTANTS_NOTE, REASONS, ErrorMetrics, TimingStats,
                                        Verdict, workload_measure)

PROMPT_BACKENDS = {backend.name: backend.title for backend in BACKEND_REGISTRY if backend.kernels}
MODES = ("rewrite", "diff", "repair")
# Statuses where the parent has a concrete failure worth fixing rather than speeding up.
REPAIR_STATUSES = frozenset({"compile_error", "runtime_error", "incorrect", "crashed", "timeout"})
LOG_STATUSES = frozenset({"compile_error", "runtime_error", "crashed", "timeout", "incorrect"})
_BASELINE_LABELS = {"eager": "PyTorch eager", "compile": "torch.compile"}


@dataclass(frozen=True)
class Exemplar:
    """A candidate shown to the model: the parent or an inspiration."""

    candidate_id: str
    source: str
    verdict: Verdict | None


@dataclass(frozen=True)
class Remembered:
    """A kernel remembered from a similar task (the memory), shown in rewrite prompts."""

    label: str  # where it comes from and how it was judged there
    source: str


@dataclass(frozen=True)
class PromptRequest:
    """Everything one mutation prompt depends on."""

    task_source: str
    backend: str
    precision: str
    mode: str
    parent: Exemplar
    inspirations: tuple[Exemplar, ...] = ()
    gpu_name: str = "NVIDIA H200"
    # From the memory of similar tasks: kernels (rewrite prompts only) and bounded lessons.
    remembered: tuple[Remembered, ...] = ()
    lessons: str = ""
    # The run judges the backward too: the contract asks for an autograd.Function.
    backward: bool = False
    # (atol, rtol) the judge holds outputs to (config.tolerances); None: the dtype's.
    tolerance: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.backend not in PROMPT_BACKENDS:
            raise ConfigError(f"prompt backend {self.backend!r}: use one of "
                              f"{', '.join(PROMPT_BACKENDS)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r}: use one of {', '.join(PRECISIONS)}")
        if self.mode not in MODES:
            raise ConfigError(f"mutation mode {self.mode!r}: use one of {', '.join(MODES)}")


def build_messages(request: PromptRequest,
                   templates_dir: Path | None = None) -> list[dict[str, str]]:
    """The system and user chat messages for one mutation."""
    environment = _environment(templates_dir)
    dtype = PRECISIONS[request.precision]
    atol, rtol = request.tolerance or tolerances(dtype)
    shared = {"backend": request.backend, "backend_name": PROMPT_BACKENDS[request.backend],
              "precision": request.precision, "dtype": dtype, "gpu_name": request.gpu_name,
              "backward": request.backward}
    system = _render(environment, "system.j2", {**shared, "atol": f"{atol:g}", "rtol": f"{rtol:g}"})
    user = _render(environment, "user.j2", {
        **shared,
        "task_source": request.task_source.strip(),
        "mode": request.mode,
        "parent": {"id": request.parent.candidate_id, "source": request.parent.source.strip(),
                   "feedback": feedback(request.parent.verdict),
                   "bottleneck": bottleneck(request.parent.verdict)},
        "inspirations": [{"id": item.candidate_id, "source": item.source.strip(),
                          "summary": summary(item.verdict)} for item in request.inspirations],
        # Whole kernels help a rewrite; a diff or a repair works on its parent alone.
        "remembered": [{"label": item.label, "source": item.source.strip()}
                       for item in request.remembered] if request.mode == "rewrite" else [],
        "lessons": request.lessons.strip(),
    })
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def choose_mode(parent_verdict: Verdict | None, rng: random.Random,
                diff_probability: float = 0.5) -> str:
    """Repair a parent that failed; otherwise rewrite it or edit it by diff at random."""
    if not 0.0 <= diff_probability <= 1.0:
        raise ConfigError(f"diff_probability={diff_probability}: use a value in [0, 1]")
    if parent_verdict is not None and parent_verdict.status in REPAIR_STATUSES:
        return "repair"
    return "diff" if rng.random() < diff_probability else "rewrite"


# Templates -----------------------------------------------------------------------------

def _package_template(name: str) -> tuple[str, str, Callable[[], bool]] | None:
    resource = resources.files("kernelevo").joinpath("prompts").joinpath(name)
    if not resource.is_file():
        return None
    return resource.read_text(encoding="utf-8"), str(resource), lambda: True


def _environment(templates_dir: Path | None) -> jinja2.Environment:
    if templates_dir is not None and not Path(templates_dir).is_dir():
        raise ConfigError(f"prompt templates directory {templates_dir} does not exist: "
                          "create it or leave the setting out to use the built-in templates")
    return _cached_environment(None if templates_dir is None else str(templates_dir))


# An environment keeps its compiled templates, and the search renders thousands of prompts.
# User files are still re-read when they change (FileSystemLoader checks their mtime).
@functools.lru_cache(maxsize=8)
def _cached_environment(templates_dir: str | None) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = [jinja2.FunctionLoader(_package_template)]
    if templates_dir is not None:
        loaders.insert(0, jinja2.FileSystemLoader(templates_dir))
    return jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), autoescape=False,
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)


def _render(environment: jinja2.Environment, name: str, context: dict[str, Any]) -> str:
    try:
        return environment.get_template(name).render(**context).strip() + "\n"
    except jinja2.TemplateError as exc:
        raise ConfigError(f"prompt template {_where(exc, name)}: {exc.message}; fix the template "
                          "or remove it from the templates directory to use the built-in one. "
                          f"Variables available: {', '.join(sorted(context))}") from exc


def _where(exc: jinja2.TemplateError, name: str) -> str:
    """The template file and line an error comes from (an include may be the culprit)."""
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"{exc.filename or exc.name or name}, line {exc.lineno}"
    # Jinja rewrites render tracebacks so frames carry the template's file and line.
    found = name
    traceback = exc.__traceback__
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            found = f"{filename}, line {traceback.tb_lineno}"
        traceback = traceback.tb_next
    return found


# Feedback ------------------------------------------------------------------------------

def feedback(verdict: Verdict | None, max_log_chars: int = 3000) -> str:
    """What the model learns from a verdict, as plain text lines."""
    if verdict is None:
        return "status: not evaluated yet"
    explanation = REASONS.get(verdict.reason, ("", ""))[1]
    lines = [f"status: {verdict.status} ({verdict.reason}"
             + (f": {explanation})" if explanation else ")")]
    if verdict.message and verdict.message != explanation:
        lines.append(f"message: {verdict.message.strip()}")
    if verdict.errors is not None:
        lines.extend(_mismatch_lines(verdict.errors))
    if verdict.ok:
        lines.extend(_timing_lines(verdict))
    if verdict.ok and verdict.profile is not None:
        lines.extend(profile_section(verdict.profile))
    lines.extend(f"flag: {flag}" for flag in verdict.flags)
    # A search told that constant weights go unchecked would drop them to gain speed.
    lines.extend(f"note: {note}" for note in verdict.notes
                 if not note.startswith(CONSTANTS_NOTE))
    if verdict.logs.strip() and verdict.status in LOG_STATUSES:
        lines.append("log (trimmed):\n" + trim_log(verdict.logs, max_log_chars))
    return "\n".join(lines)


def summary(verdict: Verdict | None) -> str:
    """One line about a verdict, for inspirations."""
    if verdict is None:
        return "not evaluated"
    if verdict.ok and "candidate" in verdict.timings:
        parts = [f"ok, {verdict.timings['candidate'].median_ms:.4f} ms"]
        if verdict.speedup_vs_eager:
            parts.append(f"{verdict.speedup_vs_eager:.2f}x vs eager")
        if verdict.speedup_vs_compile:
            parts.append(f"{verdict.speedup_vs_compile:.2f}x vs torch.compile")
        if summary_line(verdict.profile):
            parts.append(summary_line(verdict.profile)[:PROFILE_SUMMARY_MAX_CHARS])
        return ", ".join(parts)
    text = f"{verdict.status} ({verdict.reason})"
    if verdict.errors is not None:
        text += f", max abs error {verdict.errors.max_abs_error:.3g}"
    return text


# The profile's share of a prompt, bounded: at 4 characters a token, the parent's
# section stays under 150 tokens and an inspiration's clause under 25.
PROFILE_MAX_CHARS = 600
PROFILE_SUMMARY_MAX_CHARS = 100


def profile_section(profile: Profile, max_chars: int = PROFILE_MAX_CHARS) -> list[str]:
    """The parent's profile in a few lines: bottleneck, roofline, top kernels."""
    if profile.breakdown is None and profile.roofline is None:
        return []  # nothing measured (no GPU): a note would cost tokens and teach nothing
    lines, used = ["profile (where the time goes, taken after timing):"], 0
    for line in prompt_lines(profile):
        line = line[:160]
        if used + len(line) + 1 > max_chars - len(lines[0]):
            break
        lines.append(line)
        used += len(line) + 1
    return lines if len(lines) > 1 else []


def bottleneck(verdict: Verdict | None) -> str:
    """The profile's diagnosis of a passing parent, for the speed instructions ('' if none)."""
    if verdict is None or not verdict.ok or verdict.profile is None:
        return ""
    return verdict.profile.diagnosis


def _mismatch_lines(errors: ErrorMetrics) -> list[str]:
    lines = [f"mismatch: max abs error {errors.max_abs_error:.4g}, max rel error "
             f"{errors.max_rel_error:.4g}, {errors.mismatch_fraction:.2%} of elements beyond "
             f"tolerance, relative L2 error {errors.rel_l2_error:.4g}"]
    if errors.worst_index:
        index = ", ".join(str(i) for i in errors.worst_index)
        lines.append(f"worst element: index ({index}): got {errors.worst_value:.6g}, "
                     f"expected {errors.worst_expected:.6g}")
    if errors.atol or errors.rtol:
        lines.append(f"tolerance: atol {errors.atol:g} (times max(1, rms(ref))), "
                     f"rtol {errors.rtol:g}")
    return lines


def _timing_lines(verdict: Verdict) -> list[str]:
    own = verdict.timings.get("candidate")
    if own is None:
        return ["time: not measured"]
    measure = _MEASURE_WORDS.get(verdict.timing_measure, verdict.timing_measure or "GPU time")
    lines = [f"time ({measure}): {_stats(own)}"]
    speedups = {"eager": verdict.speedup_vs_eager, "compile": verdict.speedup_vs_compile}
    for name, stats in verdict.timings.items():
        if name == "candidate":
            continue
        gain = speedups.get(name)
        speed = f" -> speedup {gain:.2f}x" if gain else ""
        lines.append(f"{_BASELINE_LABELS.get(name, name)}: {_stats(stats)}{speed}")
    return lines + _training_lines(verdict)


def _training_lines(verdict: Verdict) -> list[str]:
    """A task whose backward is judged: the training step's and the backward's times."""
    lines = []
    for workload, words in (("train", "training step (forward with grad and backward)"),
                            ("backward", "backward alone")):
        measure = workload_measure(workload, verdict.timing_measure)
        own = verdict.measures.get(measure, {}).get("candidate")
        if own is None:
            continue
        gains = [f"{gain:.2f}x vs {_BASELINE_LABELS.get(name, name)}"
                 for name in ("eager", "compile")
                 for gain in [verdict.speedup_in(measure, name)] if gain]
        lines.append(f"{words}: {_stats(own)}" + (f" -> speedup {', '.join(gains)}"
                                                  if gains else ""))
    return lines


# What each measure means, so the model knows what it is asked to lower.
_MEASURE_WORDS = {
    "call": "call time: host time per call in a loop of calls, launch overhead included, "
            "what a user calling the model waits",
    "gpu": "GPU time: device time per call, launch gaps hidden",
    "kernelbench": "KernelBench's protocol: mean of 100 event-timed calls",
}


def _stats(stats: TimingStats) -> str:
    return (f"{stats.median_ms:.4f} ms median (IQR {stats.iqr_ms:.4f} ms, "
            f"{stats.samples} samples)")


# Logs ----------------------------------------------------------------------------------

# Lines that cost tokens and teach nothing: build-system chatter, include chains,
# compiler command lines, repeated header warnings.
_NOISE = re.compile(
    r"^\s*(\[\d+/\d+\]|In file included from|from \S+[:,]\s*$|Emitting ninja|Building extension"
    r"|Allowing ninja|Detected CUDA files|Loading extension|Using \S+ as PyTorch extensions root"
    r"|Creating extension directory|ninja: build stopped|Remark: The warnings can be suppressed"
    r"|(\S*/)?(nvcc|c\+\+|g\+\+|gcc|clang\+\+)\s+-|\S*/site-packages/torch/include/\S*: warning)")
_ERROR = re.compile(r"\berror\b|Error\b|Traceback|Exception\b|FAILED|undefined reference", re.I)
_WARNING = re.compile(r"^\S+?(\(\d+\)|:\d+(:\d+)?):\s*warning\b")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MAX_LINE_CHARS = 300
_ERROR_CONTEXT_LINES = 2  # nvcc puts the offending source line and a caret after the error


def trim_log(log: str, max_chars: int = 3000) -> str:
    """The first error lines and the tail of a compiler or runtime log, noise removed."""
    lines = _clean_lines(log)
    if any(_ERROR.search(line) for line in lines):
        # Warnings never explain a failure, and a header can emit hundreds of them.
        lines = [line for line in lines if not _WARNING.match(line)]
    if len("\n".join(lines)) <= max_chars:
        return "\n".join(lines)
    head = _first_error_lines(lines, max_chars // 2)
    budget = max_chars - sum(len(lines[i]) + 1 for i in head) - 60
    tail: list[int] = []
    for index in range(len(lines) - 1, -1, -1):
        if index in head:
            continue
        if len(lines[index]) + 1 > budget:
            break
        tail.append(index)
        budget -= len(lines[index]) + 1
    return _join_kept(lines, sorted(set(head) | set(tail)))


def _clean_lines(log: str) -> list[str]:
    cleaned: list[str] = []
    for line in _ANSI.sub("", log.replace("\r\n", "\n")).split("\n"):
        line = line.rstrip()
        if not line or _NOISE.match(line) or (cleaned and cleaned[-1] == line):
            continue
        if len(line) > _MAX_LINE_CHARS:
            line = line[:_MAX_LINE_CHARS] + " [...]"
        cleaned.append(line)
    return cleaned


def _first_error_lines(lines: list[str], budget: int) -> list[int]:
    kept: list[int] = []
    for index, line in enumerate(lines):
        if not _ERROR.search(line) or index in kept:
            continue
        group = [i for i in range(index, min(index + 1 + _ERROR_CONTEXT_LINES, len(lines)))
                 if i not in kept]
        cost = sum(len(lines[i]) + 1 for i in group)
        if cost > budget:
            break
        kept.extend(group)
        budget -= cost
    return kept


def _join_kept(lines: list[str], kept: list[int]) -> str:
    out: list[str] = []
    previous = -1
    for index in [*kept, len(lines)]:
        skipped = index - previous - 1
        if skipped:
            out.append(f"[... {skipped} line{'s' if skipped > 1 else ''} omitted ...]")
        if index < len(lines):
            out.append(lines[index])
        previous = index
    return "\n".join(out)
