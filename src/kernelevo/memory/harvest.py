"""What a run teaches the memory: its passing kernels, the edits that paid, the failures
that recurred and the change that fixed each.

Read from the run's own store after the run (and each new elite as it is
judged), so nothing here can touch a verdict: the memory only copies them.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kernelevo.candidate import KERNEL_BACKENDS
from kernelevo.memory.signature import Signature
from kernelevo.memory.store import EditMemory, FixMemory, KernelMemory, MemoryStore

# Statuses a later candidate can fix; a reason seen with one of these is a failure.
FAILURE_STATUSES = frozenset({"compile_error", "runtime_error", "incorrect", "crashed",
                              "timeout"})
MIN_GAIN = 1.05  # an edit's speedup over its parent below this is noise, not a lesson
DIFF_MAX_LINES = 40
DIFF_MAX_BYTES = 3000
# A run's latest candidates read for its edits and fixes, and its fastest kernels: a
# bound, so the end of a 200,000-candidate run does not read every source.
RECENT_CANDIDATES = 2_000
FASTEST_KERNELS = 20


@dataclass(frozen=True)
class Recorded:
    """How many kernels, edits and fixes one run added to the memory."""

    kernels: int = 0
    edits: int = 0
    fixes: int = 0

    def payload(self) -> dict[str, int]:
        return {"kernels": self.kernels, "edits": self.edits, "fixes": self.fixes}


def remember_kernel(memory: MemoryStore, key: str, run_id: str, stored: Any,
                    verdict: Any = None) -> bool:
    """Keep a kernel that passed (a stored candidate and its verdict); True when new."""
    verdict = verdict or stored.verdict
    if verdict is None or verdict.status != "ok" or \
            stored.candidate.backend not in KERNEL_BACKENDS:
        return False
    return memory.add_kernel(KernelMemory(
        key, stored.candidate.source, stored.candidate.backend, verdict.speedup_vs_eager,
        verdict.timing_measure or "", verdict.environment.get("gpu", ""), run_id, stored.id))


def record_run(memory: MemoryStore, run: Any, key: str, name: str, signature: Signature,
               kernels_kept: int = 3) -> Recorded:
    """Everything worth keeping from a finished (or stopped) run in `run` (a RunStore)."""
    memory.note_task(key, name, signature, runs_added=1)
    candidates = _judged(run)
    by_id = {c.id: c for c in candidates}
    kernels = sorted((c for c in candidates if _passed_kernel(c)),
                     key=lambda c: -(c.verdict.speedup_vs_eager or 1.0))
    added = sum(remember_kernel(memory, key, run.run_id, c) for c in kernels[:kernels_kept])
    edits = _edits(candidates, by_id)
    for parent, child, gain in edits:
        memory.add_edit(EditMemory(key, diff_of(parent.candidate.source, child.candidate.source),
                                   gain, run.run_id, child.id))
    fixes = _fixes(candidates, by_id)
    for reason, count, parent, child in fixes:
        memory.add_fix(FixMemory(key, reason, count,
                                 diff_of(parent.candidate.source, child.candidate.source),
                                 run.run_id))
    return Recorded(added, len(edits), len(fixes))


def _judged(run: Any) -> list[Any]:
    """The run's fastest kernels and latest candidates that have verdicts, oldest first."""
    briefs = run.briefs.fastest(FASTEST_KERNELS) + \
        run.briefs.candidates(newest_first=True, limit=RECENT_CANDIDATES)
    chosen = {brief.id: brief.sequence for brief in briefs}
    stored = [run.candidate(candidate_id)
              for candidate_id in sorted(chosen, key=chosen.__getitem__)]
    return [candidate for candidate in stored if candidate.verdict is not None]


def diff_of(before: str, after: str) -> str:
    """A unified diff with one line of context, cut to DIFF_MAX_LINES and DIFF_MAX_BYTES."""
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "parent",
                                      "child", n=1, lineterm=""))
    text = "\n".join(lines[:DIFF_MAX_LINES])
    return text.encode()[:DIFF_MAX_BYTES].decode(errors="ignore")


def _passed_kernel(stored: Any) -> bool:
    return stored.verdict.status == "ok" and stored.candidate.backend in KERNEL_BACKENDS


def _edits(candidates: list[Any], by_id: dict[str, Any]) -> list[tuple[Any, Any, float]]:
    """(parent, child, gain) for each timed kernel faster than its timed kernel parent."""
    found = []
    for child in candidates:
        parent = _parent(child, by_id)
        if parent is None or not (_passed_kernel(child) and _passed_kernel(parent)):
            continue
        before, after = parent.verdict.speedup_vs_eager, child.verdict.speedup_vs_eager
        if before and after and after / before >= MIN_GAIN:
            found.append((parent, child, round(after / before, 4)))
    return sorted(found, key=lambda edit: -edit[2])[:5]


def _fixes(candidates: list[Any], by_id: dict[str, Any]) -> list[tuple[str, int, Any, Any]]:
    """(reason, times seen in the run, failed parent, passing child) for each failure fixed."""
    seen = Counter(_failure(c) for c in candidates
                   if c.verdict.status in FAILURE_STATUSES)
    found: dict[str, tuple[str, int, Any, Any]] = {}
    for child in candidates:
        parent = _parent(child, by_id)
        if parent is None or child.verdict.status != "ok" or \
                parent.verdict.status not in FAILURE_STATUSES:
            continue
        reason = _failure(parent)
        found.setdefault(reason, (reason, seen[reason], parent, child))
    return sorted(found.values(), key=lambda fix: -fix[1])[:5]


def _failure(stored: Any) -> str:
    """A failure as the lessons name it: status, reason and the message's telling line."""
    verdict = stored.verdict
    line = telling_line(verdict.message or "")
    return f"{verdict.status} ({verdict.reason})" + (f": {line[:160]}" if line else "")


def telling_line(message: str) -> str:
    """A traceback's exception line (its last), else the message's first line."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        return lines[-1]
    return lines[0] if lines else ""


def _parent(stored: Any, by_id: dict[str, Any]) -> Any | None:
    parents = stored.candidate.parent_ids
    return by_id.get(parents[0]) if parents else None
