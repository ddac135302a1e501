"""Small helpers the run store's writers share: JSON for a column, a row that must exist."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, is_dataclass
from typing import Any

from kernelevo.errors import StoreError


def require_row(cursor: sqlite3.Cursor, what: str, key: object) -> None:
    if cursor.rowcount == 0:
        raise StoreError(f"no {what} with id {key!r} in this run")


def plain(value: Any) -> Any:
    """Dataclass config trees become dicts so they can be stored as JSON."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


def dumps(value: Any) -> str:
    # default=str keeps Paths and enums in a config readable instead of failing the run.
    return json.dumps(value, default=str, sort_keys=True)
