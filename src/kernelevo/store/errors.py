"""What can be wrong with a run database: missing, unreadable, newer, or damaged."""

from __future__ import annotations

from pathlib import Path

from kernelevo.errors import KernelEvoError


class StoreError(KernelEvoError):
    """A run database is missing, unreadable or from a newer KernelEvo."""


class DamagedStore(StoreError):
    """A run database that is empty, not SQLite, or lacks part of its schema."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is damaged: {what}. It was left as it is: restore it from a copy, or "
            "move its run folder aside (KernelEvo never rebuilds a damaged run.db, which "
            "would hide what was lost)")
