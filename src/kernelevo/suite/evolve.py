"""A suite's search mode: `evolve` on each task, within a budget per task, its best kernel a row.

Each task's run lives in `<out>/runs/<task>/`, so a suite killed mid-search
resumes that task's run (`--resume` of evolve) instead of starting it again.
The task's solution files, if any, are the search's seeds.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelevo.config import EvalConfig


@dataclass(frozen=True)
class SearchBudget:
    """What `evolve` gets per task: models and endpoint, and limits (as evolve's flags)."""

    models: tuple[str, ...] = ()
    base_url: str | None = None
    tokens: str | None = None
    usd: str | None = None
    time: str | None = None
    candidates: int | None = None
    memory: bool = True  # recall and record what similar tasks taught (docs/memory.md)


def runs_folder(out: Path, key: str) -> Path:
    return out / "runs" / re.sub(r"[^A-Za-z0-9_.-]+", "_", key)


def evolve_task(out: Path, key: str, task: Any, seeds: list[Path], config: EvalConfig,
                search: SearchBudget, gpus: tuple[int, ...] = ()) -> dict[str, Any]:
    """Search one task (or resume its stored run) and describe its best kernel as a row."""
    import kernelevo
    from kernelevo.store.listing import list_runs

    folder = runs_folder(out, key)
    earlier = list_runs(folder) if folder.is_dir() else []
    started = time.perf_counter()
    result = kernelevo.evolve(
        task, seeds=[str(s) for s in seeds] or None, models=list(search.models) or None,
        base_url=search.base_url, tokens=search.tokens, usd=search.usd, time=search.time,
        candidates=search.candidates, runs_dir=folder, quiet=True, memory=search.memory,
        gpus=",".join(map(str, gpus)) if gpus else None,
        resume=earlier[0].run_id if earlier else None, **_settings(config))
    progress = result.progress
    found = progress.best_id is not None
    outcome = progress.outcome
    return {"reason": "passed" if found else "no_kernel_found",
            "status": "ok" if found else "failed", "passed_kernel": found,
            "message": outcome.reason if outcome else "", "run": result.run_id,
            "candidate": progress.best_id, "measure": config.timing.measure,
            "speedup": {"eager": progress.best_vs_eager, "compile": progress.best_vs_compile},
            "tokens": progress.tokens, "usd": progress.cost_usd,
            "wall_s": round(time.perf_counter() - started, 2)}


def _settings(config: EvalConfig) -> dict[str, Any]:
    """The suite's evaluation settings as evolve's keyword arguments."""
    return {"device": config.device, "precision": config.precision, "policy": config.policy,
            "timeout_s": config.timeout_s, "measure": config.timing.measure,
            "baselines": config.timing.baselines}
