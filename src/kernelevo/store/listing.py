"""Every run under a runs folder, summarised for `kernelevo runs` and the UI."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kernelevo.errors import StoreError
from kernelevo.store.lock import status_now
from kernelevo.store.run_store import DB_NAME, RunStore
from kernelevo.store.records import RunSummary


def list_runs(runs_dir: str | Path) -> list[RunSummary]:
    """Every run under `runs_dir`, oldest first; unreadable runs carry a `problem`."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    summaries = [_summarise(path) for path in sorted(root.glob(f"*/{DB_NAME}"))]
    return sorted(summaries, key=lambda summary: (summary.created_at, summary.run_id))


def folders_without_runs(runs_dir: str | Path) -> list[str]:
    """Names of the folders under `runs_dir` that hold no run.db: no runs, left out of lists."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    return sorted(path.name for path in root.iterdir()
                  if path.is_dir() and not path.name.startswith(".")
                  and not (path / DB_NAME).exists())


def _summarise(path: Path) -> RunSummary:
    run_id = path.parent.name
    try:
        with RunStore.read(path) as store:
            info, totals, best = store.run_info(), store.totals(), store.briefs.best()
    except (StoreError, sqlite3.Error) as exc:
        return RunSummary(run_id=run_id, path=path.parent, problem=str(exc))
    return RunSummary(
        run_id=info.id,
        path=path.parent,
        task_name=info.task_name,
        status=status_now(info.status, path.parent),
        created_at=info.created_at,
        finished_at=info.finished_at,
        candidates=sum(totals.candidates_by_status.values()),
        best_speedup_vs_eager=best.speedup_vs_eager if best else None,
        best_id=best.id if best else None,
        cost_usd=totals.cost_usd,
        tokens=totals.tokens_in + totals.tokens_out,
        estimated_tokens=totals.estimated_tokens,
    )
