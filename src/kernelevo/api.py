"""The Python API: judge, compare, evolve and export from a script or a notebook.

    import kernelevo
    verdict = kernelevo.evaluate("examples/softmax/task.py",
                                 "examples/softmax/triton_candidate.py")

Each function does what the command of the same name does, with settings as
keyword arguments (`precision="fp16"`, `device="cpu"`, `timing="call"`, any
field of EvalConfig or TimingConfig) and results as objects instead of text.
A failed candidate is a Verdict, never an exception; bad input raises a
KernelEvoError that says what to fix. No `if __name__ == "__main__":` guard
is needed: judging children never run the caller's script.
"""

from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Union

from kernelevo.candidate import Candidate, detect_backend, load_candidate
from kernelevo.config import EvalConfig
from kernelevo.config_file import eval_config, eval_tables, resolve
from kernelevo.errors import CandidateError, ConfigError
from kernelevo.task import Task, load_task, task_from_source

if TYPE_CHECKING:
    from kernelevo.evaluate.parent.compare import ComparisonResult
    from kernelevo.evaluate.verdict import Verdict
    from kernelevo.model.apply import Applied
    from kernelevo.run.driver import EvolveResult
    from kernelevo.search.outcome import Progress as RunProgress

__all__ = ["Exported", "apply", "compare", "evaluate", "evolve", "export"]

TaskLike = Union[str, os.PathLike, Task]
CandidateLike = Union[str, os.PathLike, Candidate]
Progress = Callable[[str], None]

def evaluate(task: TaskLike, candidate: CandidateLike, *, backend: str | None = None,
             kernelbench_dir: str | None = None, config_file: str | None = None,
             progress: Progress | None = None, **settings: Any) -> Verdict:
    """Judge one candidate: correctness, honesty and speed against eager and torch.compile.

    `task` is a file, a `kernelbench:level1/19` reference, source text or a
    Task; `candidate` a file, source text or a Candidate.
    """
    from kernelevo.evaluate.parent.judge import Judge

    config = _eval_config(config_file, settings)
    judge = Judge(as_task(task, kernelbench_dir), config, progress=progress)
    return judge.evaluate(as_candidate(candidate, backend))


def compare(task: TaskLike, first: CandidateLike, second: CandidateLike, *,
            kernelbench_dir: str | None = None, config_file: str | None = None,
            progress: Progress | None = None, **settings: Any) -> ComparisonResult:
    """Judge two candidates alike, timed interleaved; `faster` is set only above noise."""
    from kernelevo.evaluate.parent.compare import compare_candidates

    config = _eval_config(config_file, settings)
    return compare_candidates(as_task(task, kernelbench_dir), as_candidate(first),
                              as_candidate(second), config, progress=progress)


def evolve(task: TaskLike | None = None, *, seeds: list[str | os.PathLike[str]] | None = None,
           backend: str | None = None, models: list[str] | dict[str, float] | None = None,
           base_url: str | None = None, api_key_env: str | None = None,
           tokens: str | int | None = None, usd: str | float | None = None,
           time: str | float | None = None, candidates: int | None = None,
           gpus: str | None = None, cluster: str | None = None,
           cluster_slots: int | None = None, resume: str | None = None,
           runs_dir: str | os.PathLike[str] | None = None, llm_in_flight: int | None = None,
           islands: int | None = None, kernelbench_dir: str | None = None,
           config_file: str | None = None, quiet: bool = False,
           on_progress: Callable[[RunProgress], None] | None = None,
           memory: bool = True, **settings: Any) -> EvolveResult:
    """Search for faster kernels within budgets, as `kernelevo evolve`; the run is stored.

    Without `models` the zero-token tuner runs alone and needs a Triton or
    CUDA kernel among `seeds`. `time` is a duration ("2h") or seconds.
    Arguments left as None take the config file's value, else the default
    (backend triton, 3 islands, 8 LLM calls in flight, key in OPENAI_API_KEY).
    The run's notices go to stderr unless `quiet`; `on_progress` is given
    each Progress as the search goes. `memory=False` neither recalls nor
    records what similar tasks taught (as `--no-memory`; docs/memory.md).
    """
    import kernelevo.run.setup as setup
    from kernelevo.run.driver import PlainView, run_evolve

    if task is None and resume is None:
        raise ConfigError("give a task, or resume=RUN to continue a run")
    overrides = {**_eval_overrides(settings), **setup.evolve_overrides(
        backend, islands, llm_in_flight, models, base_url, api_key_env, tokens, usd, time,
        candidates, cluster, cluster_slots, no_memory=not memory)}
    options = setup.evolve_options(resolve(config_file, overrides),
                                   runs_dir=runs_dir or _runs_dir(), resume=resume, gpus=gpus,
                                   seeds=[Path(seed) for seed in seeds or []])
    loaded = as_task(task, kernelbench_dir) if task is not None else None
    view = PlainView(say=_ignore if quiet else _to_stderr, on_progress=on_progress or _ignore)
    return _outside_event_loop(lambda: run_evolve(loaded, options, view))


@dataclass(frozen=True)
class Exported:
    """A written standalone file and, unless skipped, its fresh verdict."""

    path: Path
    verdict: Verdict | None


def export(run: str | os.PathLike[str] | EvolveResult, path: str | os.PathLike[str], *,
           best: bool | None = None, candidate: str | None = None,
           runs_dir: str | os.PathLike[str] | None = None, recheck: bool = True,
           progress: Progress | None = None, force: bool = False) -> Exported:
    """Write the best (default) or a chosen candidate of a run as a KernelBench file.

    `run` is a run id, part of one, its folder or an evolve() result. The file
    is judged again on the way out unless `recheck=False`; an existing file
    is replaced only with `force=True`.
    """
    from kernelevo.run.view import API_WORDS, export_candidate

    best = candidate is None if best is None else best
    where = getattr(run, "run_dir", run)
    written, verdict = export_candidate(Path(runs_dir or _runs_dir()), str(where), Path(path),
                                        candidate, best, recheck=recheck, progress=progress,
                                        force=force, words=API_WORDS)
    return Exported(written, verdict)


def apply(model: Any, kernels: str | os.PathLike[str], *,
          tasks: str | os.PathLike[str] | None = None, guard: bool = True,
          shapes: dict[str, list[tuple[tuple[int, ...], ...]]] | None = None) -> Applied:
    """Swap a model's extracted submodules for their kernels, as custom ops, in place.

    `kernels` holds `<task>.py` kernel files; `tasks` is the folder `kernelevo
    model extract` wrote (default: `kernels`). Each kernel uses the
    submodule's own weights and runs only at input shapes it was checked at,
    unless `guard=False` (docs/model.md). A training task's kernel (`extract
    --backward`) is checked on its gradients and trains with its own backward.
    `restore()` on the result undoes it.
    """
    from kernelevo.model.apply import apply as apply_kernels

    return apply_kernels(model, kernels, tasks=tasks, guard=guard, shapes=shapes)


def as_task(task: TaskLike, kernelbench_dir: str | None = None) -> Task:
    """A Task from a Task, a path, a `kernelbench:` reference or source text."""
    if isinstance(task, Task):
        return task
    if isinstance(task, str) and "\n" in task:
        return task_from_source(task)
    return load_task(os.fspath(task), kernelbench_dir)


def as_candidate(candidate: CandidateLike, backend: str | None = None) -> Candidate:
    """A Candidate from a Candidate, a path or source text; the backend is detected."""
    if isinstance(candidate, Candidate):
        return candidate
    if isinstance(candidate, str) and "\n" in candidate:
        if "ModelNew" not in candidate:
            raise CandidateError("the candidate source defines no ModelNew: a candidate must "
                                 "define `class ModelNew(nn.Module)`")
        return Candidate(source=candidate, backend=backend or detect_backend(candidate))
    return load_candidate(os.fspath(candidate), backend)


def _eval_config(config_file: str | None, settings: dict[str, Any]) -> EvalConfig:
    """The EvalConfig of defaults, then the config file, then `settings`."""
    return eval_config(resolve(config_file, _eval_overrides(settings)))


def _eval_overrides(settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Settings as the CLI's flags give them (`timing="call"` names the measure), by table."""
    settings = dict(settings)
    if isinstance(settings.get("timing"), str):
        settings["measure"] = settings.pop("timing")
    return eval_tables(settings)


def _ignore(_: Any) -> None:
    return None


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _runs_dir() -> Path:
    from kernelevo.run.view import default_runs_dir

    return default_runs_dir()


def _outside_event_loop(work: Callable[[], Any]) -> Any:
    """Run `work` here, or in a thread when this thread runs an event loop (Jupyter).

    The search runs its own loop with asyncio.run, which refuses to start
    inside a running one.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return work()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelevo-evolve") as pool:
        return pool.submit(work).result()
