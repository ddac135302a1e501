"""How the best kernel came to be, and where the search's elites sit.

Lineage follows the first parent from a candidate back to its seed. Cells
are rebuilt by replaying the verdicts into a fresh `Archive`, in the order
the search saw them, as a resumed run rebuilds its archive, so the grid
shows the elites the search itself was choosing parents from. Only the
verdicts that could become elites are replayed (`Archive.replay_offers`);
tests hold the result equal to `Archive.replay` of every verdict.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from kernelevo.report.diff import diff_counts
from kernelevo.search.archive import Archive
from kernelevo.store.run_store import StoredCandidate
from kernelevo.store.offers import ArchiveOffers

# Past this many steps the chain is cut: a cycle would be a corrupt store,
# and no real search breeds this deep.
MAX_LINEAGE_STEPS = 10_000


@dataclass(frozen=True)
class LineageStep:
    """One candidate on the path to the best, and what it changed from its parent."""

    candidate_id: str
    name: str
    origin: str
    change: str
    lines_added: int
    lines_removed: int
    speedup_vs_eager: float | None
    gain: float | None  # over the last timed ancestor (1.25: 25% faster); None when untimed
    status: str


@dataclass(frozen=True)
class CellView:
    """One occupied or failing cell of one island."""

    cell: tuple[Hashable, ...]
    elite_id: str | None
    fitness: float | None
    failures: int


@dataclass(frozen=True)
class IslandCells:
    index: int
    cells: tuple[CellView, ...]


def lineage(by_id: Mapping[str, StoredCandidate], start_id: str,
            modes: Mapping[str, str]) -> tuple[LineageStep, ...]:
    """Steps from the seed to `start_id`; `modes` maps candidate ids to their LLM mode."""
    chain: list[StoredCandidate] = []
    seen: set[str] = set()
    current: str | None = start_id
    while current is not None and current in by_id and current not in seen \
            and len(chain) < MAX_LINEAGE_STEPS:
        seen.add(current)
        stored = by_id[current]
        chain.append(stored)
        parents = stored.candidate.parent_ids
        current = parents[0] if parents else None
    chain.reverse()
    steps = []
    # Gains are measured from the last timed ancestor, so a repair of a broken
    # parent still shows what it gained over the last kernel that worked.
    last_speedup: float | None = None
    for index, stored in enumerate(chain):
        parent = chain[index - 1] if index else None
        steps.append(_step(stored, parent, modes.get(stored.id, ""), last_speedup))
        last_speedup = steps[-1].speedup_vs_eager or last_speedup
    return tuple(steps)


def _step(stored: StoredCandidate, parent: StoredCandidate | None, mode: str,
          earlier_speedup: float | None) -> LineageStep:
    added, removed = diff_counts(parent.candidate.source, stored.candidate.source) if parent \
        else (0, 0)
    speedup = _speedup(stored)
    gain = speedup / earlier_speedup if speedup and earlier_speedup else None
    return LineageStep(
        candidate_id=stored.id, name=stored.candidate.name, origin=stored.candidate.origin,
        change=describe_change(stored, parent, mode), lines_added=added, lines_removed=removed,
        speedup_vs_eager=speedup, gain=gain,
        status=stored.verdict.status if stored.verdict else "pending")


def describe_change(stored: StoredCandidate, parent: StoredCandidate | None, mode: str) -> str:
    """A short phrase: the tuner's parameter moves, the LLM's mode, or 'starting point'."""
    origin = stored.candidate.origin
    if parent is None:
        return "starting point" if origin in ("seed", "user") else f"{origin} (parent not stored)"
    if origin == "tuner":
        # The tuner names its variants by their moves, e.g. "BLOCK 1024->2048".
        return f"tuned {stored.candidate.name}"
    if origin == "repair" or mode == "repair":
        broken = parent.verdict.reason if parent.verdict else "an unevaluated parent"
        return f"repair of {broken}"
    if origin == "llm":
        return f"LLM {mode}" if mode else "LLM proposal"
    return origin


def _speedup(stored: StoredCandidate | None) -> float | None:
    if stored is None or stored.verdict is None or not stored.verdict.ok:
        return None
    return stored.verdict.speedup_vs_eager


def archive_cells(offers: ArchiveOffers,
                  search_config: Mapping[str, Any]) -> tuple[IslandCells, ...]:
    """Elites and failure counts per island, replayed as a resumed run would."""
    settings = archive_settings(offers.highest_island, search_config)
    archive = Archive.replay_offers(offers.offers, offers.additions, offers.failures, **settings)
    return cells_of(archive)


def archive_settings(highest_island: int, search_config: Mapping[str, Any]) -> dict[str, int]:
    """The islands (at least as many as the verdicts name) and migration interval."""
    islands = max(int(search_config.get("islands", 1) or 1), highest_island + 1)
    interval = int(search_config.get("migration_interval", 0) or 0)
    return {"num_islands": islands, "migration_interval": interval}


def cells_of(archive: Archive) -> tuple[IslandCells, ...]:
    """Every island's cells, as the page shows them."""
    return tuple(_island_cells(archive, index) for index in range(archive.num_islands))


def _island_cells(archive: Archive, index: int) -> IslandCells:
    elites = {elite.cell: elite for elite in archive.elites(index)}
    failures = archive.failures(index)
    cells = [CellView(cell, elites[cell].candidate_id if cell in elites else None,
                      elites[cell].fitness if cell in elites else None, failures.get(cell, 0))
             for cell in sorted(set(elites) | set(failures), key=repr)]
    return IslandCells(index, tuple(cells))
