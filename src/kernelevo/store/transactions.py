"""What the store's writers do when a write fails: undo the transaction, name the disk's fault."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kernelevo.errors import StoreError


def rollback(connection: sqlite3.Connection) -> None:
    """Undo an open transaction; one SQLite already undid (a full disk does) is left alone."""
    if connection.in_transaction:
        try:
            connection.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass  # the error that led here says more than "cannot rollback"


def write_error(path: Path, error: sqlite3.OperationalError) -> StoreError | None:
    """A StoreError naming the file and the fix for a full or failing disk; else None."""
    text = str(error)
    if "disk is full" in text:
        return StoreError(f"cannot write {path}: the disk is full ({text}): free space on its "
                          "filesystem (df -h)")
    if "disk I/O error" in text or "readonly" in text:
        return StoreError(f"cannot write {path}: {text}: check the disk and its permissions")
    return None
