"""`runs --json`, `show --json` and `evolve --json`: the same facts as the tables, for scripts.

Numbers stay numbers (speedups as ratios, times as Unix seconds, cost in
dollars) and absent values are null, never "-".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernelevo.errors import StoreError
from kernelevo.store.lock import status_now
from kernelevo.store.run_store import RankEntry, RunStore, Totals
from kernelevo.store.listing import list_runs

TOP_CANDIDATES = 10
# Config keys never printed: they could name or hold a credential.
_SECRET_WORDS = ("key", "secret", "password")


def runs_json(runs_dir: Path) -> list[dict[str, Any]]:
    """One object per run under `runs_dir`, oldest first; unreadable runs carry `problem`."""
    listed = []
    for summary in list_runs(runs_dir):
        entry: dict[str, Any] = {"run_id": summary.run_id, "path": str(summary.path),
                                 "problem": summary.problem or None}
        if not summary.problem:
            try:
                with RunStore.read(summary.path) as store:
                    entry.update(_run_facts(store))
            except (StoreError, sqlite3.Error) as exc:  # deleted or corrupted since listed
                entry["problem"] = str(exc)
        listed.append(entry)
    return listed


def run_json(store: RunStore) -> dict[str, Any]:
    """A run's settings (no secrets), spend, candidates, ranking and best verdict."""
    facts = _run_facts(store)
    info, ranking = store.run_info(), store.briefs.ranking(TOP_CANDIDATES)
    best = store.candidate(ranking.best.id) if ranking.best else None
    facts.update({
        "config": public_config(info.config),
        "baseline": _entry(ranking.baseline),
        "top": [_entry(entry) for entry in ranking.kernels[:TOP_CANDIDATES]],
        "passing_kernels": ranking.passing,
        "best_verdict": best.verdict.to_dict() if best and best.verdict else None,
    })
    return facts


def evolve_json(run_id: str, run_dir: Path, progress: Any) -> dict[str, Any]:
    """The final summary of `kernelevo evolve`: how the run stopped and what it found."""
    outcome = progress.outcome
    return {"run_id": run_id, "run_dir": str(run_dir),
            "outcome": outcome.status if outcome else None,
            "reason": outcome.reason if outcome else progress.message,
            "best_id": progress.best_id, "best_vs_eager": progress.best_vs_eager,
            "best_vs_compile": progress.best_vs_compile,
            "candidates_by_status": dict(progress.by_status),
            "candidates_by_origin": dict(progress.by_origin), "tokens": progress.tokens,
            "estimated_tokens": progress.estimated_tokens,
            "cost_usd": progress.cost_usd, "elapsed_s": progress.elapsed_s}


def public_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The stored settings without any key that could name a credential."""
    return {key: public_config(value) if isinstance(value, Mapping) else value
            for key, value in config.items()
            if not any(word in key.lower() for word in _SECRET_WORDS)}


def _run_facts(store: RunStore) -> dict[str, Any]:
    info, totals, best = store.run_info(), store.totals(), store.briefs.best()
    # `status` as `runs` shows it; `recorded_status` as run.db holds it (a driver
    # killed outright leaves `running` there).
    return {"run_id": info.id, "task": info.task_name,
            "status": status_now(info.status, Path(store.path).parent),
            "recorded_status": info.status,
            "created_at": info.created_at, "finished_at": info.finished_at,
            **_spend(totals), "best": _entry(best)}


def _spend(totals: Totals) -> dict[str, Any]:
    total = sum(totals.candidates_by_status.values())
    return {"candidates": total,
            "evaluated": total - totals.candidates_by_status.get("unevaluated", 0),
            "candidates_by_status": dict(totals.candidates_by_status),
            "tokens_in": totals.tokens_in, "tokens_out": totals.tokens_out,
            "cost_usd": totals.cost_usd, "llm_calls": totals.llm_calls,
            "llm_calls_in_flight": totals.llm_calls_in_flight,
            # Of tokens_in + tokens_out and cost_usd: charged as a bound, not billed.
            "estimated_tokens": totals.estimated_tokens,
            "estimated_usd": totals.estimated_usd}


def _entry(entry: RankEntry | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    facts = asdict(entry)
    facts["flags"] = list(entry.flags)
    return facts
