"""The MAP-Elites archive: the fittest candidate per behaviour cell, per island.

Fitness is the speedup over PyTorch eager (higher is better); a failed
candidate has fitness None. A timed speedup comes with the interval a rerun
of the timing can show (Verdict.speedup_vs_eager_high is its high end): a
launch-bound kernel's speedup moves 20-40 % between runs, so a challenger
inside the elite's interval only ties with it. A candidate replaces a cell's
elite only when its fitness is above the elite's high end, or above its
fitness when it has no interval; ties keep the incumbent and replays are
deterministic. Failures never become elites; they are counted per cell,
which tells the search where ideas keep breaking. Ranking (parents,
inspirations, `best`) stays by fitness alone.

Islands evolve apart so one lineage cannot take over the whole archive;
every `migration_interval` additions each island's top `migration_count`
elites are copied to the next island in a ring, where they compete under the
usual rule. Every random choice draws from the `rng` given to the archive,
so a seeded run samples the same parents again; give the archive its own
`random.Random`, since `restore` rewinds it to the snapshot's state.

Parent selection (`select_parent`): with probability `exploit_probability`
a uniform pick among the island's `top_k` elites (exploitation), otherwise a
uniform pick over all its occupied cells (exploration, which reaches cells
whose elites are slow today but may be one step from a better design).
Inspirations (`select_inspirations`): the best elites of other cells first,
because a prompt learns most from strong, different kernels; then random
picks from the rest, each slot taken from another island with probability
`foreign_probability`, so ideas also cross islands between migrations.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelevo.errors import ConfigError
from kernelevo.evaluate.verdict import Verdict
from kernelevo.store.records import Judged, speedup_to_beat

# 2: elites carry their fitness's high end; a format 1 snapshot has none.
SNAPSHOT_FORMAT = 2
_READABLE_FORMATS = (1, SNAPSHOT_FORMAT)


@dataclass(frozen=True)
class Elite:
    """The best candidate of one cell on one island; `order` breaks fitness ties.

    fitness_high: the high end of the fitness a rerun can show, None without
    an interval.
    """

    candidate_id: str
    cell: tuple[Hashable, ...]
    fitness: float
    island: int
    order: int
    fitness_high: float | None = None

    @property
    def to_beat(self) -> float:
        """The fitness a challenger must exceed to take this elite's cell."""
        return speedup_to_beat(self.fitness, self.fitness_high)


@dataclass(frozen=True)
class ArchiveEntry:
    """One addition, as replayed by `Archive.rebuild` (fitness None: failed)."""

    candidate_id: str
    cell: tuple[Hashable, ...]
    fitness: float | None
    island: int
    fitness_high: float | None = None


@dataclass(frozen=True)
class Migration:
    """One elite copied to the next island; `accepted` if it won its cell there."""

    candidate_id: str
    source_island: int
    target_island: int
    accepted: bool


@dataclass
class Island:
    """The cells of one island: elites and failure counts.

    Change `elites` through `offer` only: the ranking is kept until an elite
    changes. A replay migrates every few additions (20,000 times at 200,000
    candidates) and most migrations change nothing, so each sort is done once.
    """

    elites: dict[tuple[Hashable, ...], Elite] = field(default_factory=dict)
    failures: Counter = field(default_factory=Counter)
    _ranked: list[Elite] | None = field(default=None, repr=False, compare=False)
    # The fittest elite: a cell's elite only ever gets fitter, so a new elite
    # either leads or leaves the leader as it was.
    _top: Elite | None = field(default=None, repr=False, compare=False)

    def offer(self, elite: Elite) -> bool:
        """Keep `elite` if its cell is empty or it is fitter than the incumbent's high end.

        The incumbent's fitness and high end only ever rise: a newcomer is
        above the old high end, and its own high end is at least its fitness.
        """
        incumbent = self.elites.get(elite.cell)
        if incumbent is not None and elite.fitness <= incumbent.to_beat:
            return False
        self.elites[elite.cell] = elite
        self._ranked = None
        if self._top is None or _order(elite) < _order(self._top):
            self._top = elite
        return True

    def leaders(self, count: int) -> list[Elite]:
        """The `count` fittest elites; the first alone without sorting the rest."""
        if count == 1 and self.elites:
            if self._top is None:  # elites set directly (a restored snapshot)
                self._top = min(self.elites.values(), key=_order)
            return [self._top]
        return self._ranking()[:count]

    def ranked(self) -> list[Elite]:
        """Fittest first (a new list: the caller may change it)."""
        return list(self._ranking())

    def _ranking(self) -> list[Elite]:
        if self._ranked is None or len(self._ranked) != len(self.elites):
            self._ranked = rank(self.elites.values())
        return self._ranked


def rank(elites: Iterable[Elite]) -> list[Elite]:
    """Fittest first; among equals the earlier addition first."""
    return sorted(elites, key=_order)


def _order(elite: Elite) -> tuple[float, int]:
    return (-elite.fitness, elite.order)


def select_parent(
    ranked: Sequence[Elite], rng: random.Random, exploit_probability: float, top_k: int
) -> Elite | None:
    if not ranked:
        return None
    if rng.random() < exploit_probability:
        return rng.choice(ranked[: max(1, top_k)])
    return rng.choice(ranked)


def select_inspirations(
    own: Sequence[Elite],
    foreign: Sequence[Elite],
    k: int,
    rng: random.Random,
    foreign_probability: float,
) -> list[Elite]:
    """Half of `k` from the top of `own`, the rest drawn from both pools."""
    leaders = list(own[: (k + 1) // 2])
    rest, others = list(own[len(leaders) :]), list(foreign)
    chosen, seen = leaders, {elite.candidate_id for elite in leaders}
    while len(chosen) < k and (rest or others):
        use_foreign = bool(others) and (not rest or rng.random() < foreign_probability)
        pool = others if use_foreign else rest
        pick = pool.pop(rng.randrange(len(pool)))
        if pick.candidate_id not in seen:
            chosen.append(pick)
            seen.add(pick.candidate_id)
    return chosen


def ring_migration(islands: Sequence[Island], count: int) -> list[Migration]:
    """Copy each island's top `count` elites to the next island in the ring."""
    if len(islands) < 2 or count < 1:
        return []
    # Choose every emigrant before moving any, so one migration moves an elite one hop.
    emigrants = [island.leaders(count) for island in islands]
    moves = []
    for source, elites in enumerate(emigrants):
        target = (source + 1) % len(islands)
        for elite in elites:
            # Built directly, not by dataclasses.replace: a resume replays a
            # migration every few verdicts, 5,000 of them at 50,000 candidates.
            copy = Elite(elite.candidate_id, elite.cell, elite.fitness, target, elite.order,
                         elite.fitness_high)
            accepted = islands[target].offer(copy)
            moves.append(Migration(elite.candidate_id, source, target, accepted))
    return moves


class Archive:
    """Elites per cell on several islands, with sampling and ring migration."""

    def __init__(
        self,
        num_islands: int = 4,
        rng: random.Random | None = None,
        migration_interval: int = 25,
        migration_count: int = 1,
        *,
        exploit_probability: float = 0.7,
        top_k: int = 3,
        foreign_probability: float = 0.2,
    ) -> None:
        if num_islands < 1:
            raise ConfigError(f"num_islands must be at least 1, got {num_islands}")
        if migration_interval < 0:
            raise ConfigError(
                f"migration_interval must be >= 0 (0 turns migration off), got {migration_interval}"
            )
        self.num_islands = num_islands
        self.rng = rng if rng is not None else random.Random(0)
        self.migration_interval = migration_interval
        self.migration_count = migration_count
        self.exploit_probability = exploit_probability
        self.top_k = top_k
        self.foreign_probability = foreign_probability
        self.islands = [Island() for _ in range(num_islands)]
        self.additions = 0
        self.next_seed_island = 0
        # Moves made by the latest `add` only, so a caller that logs them
        # after each addition logs each migration once.
        self.last_migration: list[Migration] = []

    def add(
        self, candidate_id: str, cell: Sequence[Hashable], fitness: float | None, island: int,
        fitness_high: float | None = None,
    ) -> bool:
        """Offer a result; True when it became its cell's elite on `island`.

        fitness_high: the high end of `fitness`'s interval (None: no interval).
        """
        self._check_island(island)
        cell = tuple(cell)
        self.additions += 1
        self.last_migration = []
        if fitness is None or math.isnan(fitness):
            self.islands[island].failures[cell] += 1
            accepted = False
        else:
            high = None if fitness_high is None else float(fitness_high)
            elite = Elite(candidate_id, cell, float(fitness), island, self.additions, high)
            accepted = self.islands[island].offer(elite)
        if self.migration_interval and self.additions % self.migration_interval == 0:
            self.migrate()
        return accepted

    def elites(self, island: int | None = None) -> list[Elite]:
        """Elites fittest first; across islands a migrated candidate appears once per island."""
        if island is not None:
            self._check_island(island)
            return self.islands[island].ranked()
        return rank(elite for each in self.islands for elite in each.elites.values())

    def best(self, island: int | None = None) -> Elite | None:
        ranked = self.elites(island)
        return ranked[0] if ranked else None

    def failures(self, island: int | None = None) -> dict[tuple[Hashable, ...], int]:
        """Failed additions per cell, on one island or summed over all."""
        chosen = self.islands if island is None else [self.islands[island]]
        return dict(sum((each.failures for each in chosen), Counter()))

    def sample_parent(self, island: int) -> Elite | None:
        """A parent from `island`, or from any island while `island` is still empty."""
        self._check_island(island)
        ranked = self.islands[island].ranked() or _unique(self.elites())
        return select_parent(ranked, self.rng, self.exploit_probability, self.top_k)

    def sample_inspirations(self, island: int, parent_id: str | None, k: int) -> list[Elite]:
        """Up to `k` elites other than the parent and its cell, mostly from `island`."""
        self._check_island(island)
        home = self.islands[island]
        parent_cells = {e.cell for e in home.elites.values() if e.candidate_id == parent_id}
        own = [
            e for e in home.ranked() if e.candidate_id != parent_id and e.cell not in parent_cells
        ]
        own_ids = {elite.candidate_id for elite in own}
        foreign = _unique(
            elite
            for index, other in enumerate(self.islands)
            if index != island
            for elite in other.ranked()
            if elite.candidate_id != parent_id and elite.candidate_id not in own_ids
        )
        return select_inspirations(own, foreign, k, self.rng, self.foreign_probability)

    def migrate(self) -> list[Migration]:
        self.last_migration = ring_migration(self.islands, self.migration_count)
        return self.last_migration

    def choose_island(self) -> int:
        """Islands for new seeds, round-robin."""
        island = self.next_seed_island
        self.next_seed_island = (island + 1) % self.num_islands
        return island

    def _check_island(self, island: int) -> None:
        if not 0 <= island < self.num_islands:
            raise ValueError(f"island {island} out of range: this archive has {self.num_islands}")

    # -- persistence -------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {
            "num_islands": self.num_islands,
            "migration_interval": self.migration_interval,
            "migration_count": self.migration_count,
            "exploit_probability": self.exploit_probability,
            "top_k": self.top_k,
            "foreign_probability": self.foreign_probability,
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to continue exactly, as JSON-able data."""
        version, internal, gauss = self.rng.getstate()
        return {
            "format": SNAPSHOT_FORMAT,
            "settings": self.settings(),
            "additions": self.additions,
            "next_seed_island": self.next_seed_island,
            "rng_state": [version, list(internal), gauss],
            "islands": [_island_to_json(island) for island in self.islands],
        }

    @classmethod
    def restore(cls, data: dict[str, Any], rng: random.Random | None = None) -> Archive:
        """The archive a snapshot describes; `rng` is rewound to the saved state."""
        if data.get("format") not in _READABLE_FORMATS:
            raise ValueError(
                f"archive snapshot format {data.get('format')!r} is not one of "
                f"{', '.join(map(str, _READABLE_FORMATS))}: "
                "rebuild the archive from the run store instead"
            )
        archive = cls(rng=rng if rng is not None else random.Random(), **data["settings"])
        version, internal, gauss = data["rng_state"]
        archive.rng.setstate((version, tuple(internal), gauss))
        archive.additions = data["additions"]
        archive.next_seed_island = data["next_seed_island"]
        archive.islands = [
            _island_from_json(index, item) for index, item in enumerate(data["islands"])
        ]
        return archive

    @classmethod
    def rebuild(cls, entries: Iterable[ArchiveEntry], **settings: Any) -> Archive:
        """Replay additions in their original order; adding draws no randomness."""
        archive = cls(**settings)
        for entry in entries:
            archive.add(entry.candidate_id, entry.cell, entry.fitness, entry.island,
                        entry.fitness_high)
        return archive

    @classmethod
    def replay(cls, judged: Iterable[Judged], **settings: Any) -> Archive:
        """`rebuild` from a run's verdicts in the order judged (Briefs.judged_in_order).

        The archive a search had: resume rebuilds it so, and the report's grid
        of cells shows it.
        """
        archive = cls(**settings)
        for verdict in judged:
            archive.add(verdict.id, verdict.cell,
                        fitness_of(verdict.status, verdict.speedup_vs_eager), verdict.island or 0,
                        fitness_high_of(verdict.status, verdict.speedup_vs_eager_high))
        return archive

    @classmethod
    def replay_offers(cls, offers: Iterable[tuple[int, str, Sequence[Hashable], int, float,
                                                  float | None]],
                      additions: int, failures: Iterable[tuple[int, Sequence[Hashable], int]],
                      **settings: Any) -> Archive:
        """`replay` from only the verdicts that could become elites (Briefs.archive_offers).

        offers: (place from 1, candidate id, cell, island, fitness, fitness's
        high end or None) in order; `additions` verdicts in all; failures:
        (island, cell, count). Every migration falls where `replay` would make it.
        """
        archive = cls(**settings)
        for island, cell, count in failures:
            archive._check_island(island)
            archive.islands[island].failures[tuple(cell)] += count
        settled = [False]  # whether a migration now would move nothing
        for place, candidate_id, cell, island, fitness, high in offers:
            archive._check_island(island)
            archive._migrate_until(place - 1, settled)
            if archive.islands[island].offer(Elite(candidate_id, tuple(cell), float(fitness),
                                                   island, place, high)):
                settled[0] = False
            archive._migrate_until(place, settled)
        archive._migrate_until(additions, settled)
        return archive

    def _migrate_until(self, additions: int, settled: list[bool]) -> None:
        """Count additions up to `additions`, migrating at each interval passed.

        A migration that moved nothing leaves every island as it was, so the
        next one would offer the same elites to the same cells and move
        nothing too: until an elite changes (`settled[0]` False), none is run.
        """
        interval = self.migration_interval
        if interval:
            first = (self.additions // interval + 1) * interval
            for moment in range(first, additions + 1, interval):
                self.additions = moment
                if not settled[0]:
                    settled[0] = not any(move.accepted for move in self.migrate())
        self.additions = max(self.additions, additions)


def _unique(elites: Iterable[Elite]) -> list[Elite]:
    """First occurrence of each candidate (migrated copies share an id)."""
    seen: set[str] = set()
    result = []
    for elite in elites:
        if elite.candidate_id not in seen:
            seen.add(elite.candidate_id)
            result.append(elite)
    return result


def _island_to_json(island: Island) -> dict[str, Any]:
    return {
        "elites": [
            {"candidate_id": e.candidate_id, "cell": list(e.cell), "fitness": e.fitness,
             "fitness_high": e.fitness_high, "order": e.order}
            for e in island.elites.values()
        ],
        "failures": [
            {"cell": list(cell), "count": count} for cell, count in island.failures.items()
        ],
    }


def _island_from_json(index: int, data: dict[str, Any]) -> Island:
    island = Island()
    for item in data["elites"]:
        cell = tuple(item["cell"])
        island.elites[cell] = Elite(
            item["candidate_id"], cell, item["fitness"], index, item["order"],
            item.get("fitness_high"),  # absent from a format 1 snapshot
        )
    for item in data["failures"]:
        island.failures[tuple(item["cell"])] = item["count"]
    return island


def profile_descriptor(verdict: Verdict) -> dict[str, Any]:
    """The profile's descriptor of a passing kernel: its bound and roofline fraction ({} if none).

    Kept beside the cell (elite events carry it), not in it: a cell must be
    known before judging, and these are known only after.
    """
    profile = verdict.profile if verdict.ok else None
    if profile is None:
        return {}
    found: dict[str, Any] = {"bound": profile.bound} if profile.bound else {}
    if profile.roofline is not None:
        found["roofline"] = round(profile.roofline.fraction, 4)
    return found


def fitness(verdict: Verdict) -> float | None:
    """Speedup over eager under Verdict.ranked_measure, as the run store keeps it; a
    correct candidate without timings (CPU) counts as 1."""
    return fitness_of(verdict.status, verdict.ranked_speedup())


def fitness_of(status: str | None, speedup_vs_eager: float | None) -> float | None:
    """`fitness` from a verdict's status and speedup alone (a stored brief)."""
    if status != "ok":
        return None
    return speedup_vs_eager if speedup_vs_eager is not None else 1.0


def fitness_high(verdict: Verdict) -> float | None:
    """The high end of `fitness`'s interval; None without one (or without fitness)."""
    return fitness_high_of(verdict.status, verdict.ranked_speedup_high)


def fitness_high_of(status: str | None, speedup_vs_eager_high: float | None) -> float | None:
    """`fitness_high` from a verdict's status and stored high end alone."""
    return speedup_vs_eager_high if status == "ok" else None
