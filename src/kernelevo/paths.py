"""Paths the user gives: what each one is, in words, and the one check every command makes.

`Path.is_file()` is False for a folder, a named pipe and /dev/null alike, so a
plain "file not found" sent users looking for a file that was there. These
checks say what the path is instead, and never open a pipe (that would block).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kernelevo.errors import KernelEvoError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """A file mode's kind in words: "a folder", "a named pipe (FIFO)", ..., "a file"."""
    return next((name for test, name in _KINDS if test(mode)), "a file")


def _status(path: Path) -> os.stat_result | str:
    """The path's stat, or why there is none, in words."""
    try:
        return path.stat()
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "does not exist (a part of its path is a file, not a folder)"
    except PermissionError:
        return "cannot be reached (permission denied)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"


def file_problem(path: Path, empty_ok: bool = False) -> str | None:
    """Why `path` is no file to read ("does not exist", "is a folder, not a file", ...);
    None for a regular file (that holds something, unless `empty_ok`)."""
    found = _status(path)
    if isinstance(found, str):
        return found
    if stat.S_ISDIR(found.st_mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(found.st_mode):
        return f"is {kind_of(found.st_mode)}, not a regular file"
    if found.st_size == 0 and not empty_ok:
        return "is empty"
    return None


def folder_problem(path: Path, missing_ok: bool = False) -> str | None:
    """Why `path` is no folder ("does not exist", "is a file, not a folder"); None for one.

    With `missing_ok`, a path that does not exist yet passes when it could be
    made: no part of it is a file.
    """
    found = _status(path)
    if isinstance(found, str):
        if missing_ok and found.startswith("does not exist"):
            blocking = next((parent for parent in path.parents
                             if parent.exists() and not parent.is_dir()), None)
            return None if blocking is None else f"cannot be made: {blocking} is a file"
        return found
    if not stat.S_ISDIR(found.st_mode):
        return f"is {kind_of(found.st_mode)}, not a folder"
    return None


def check_file(path: str | Path, what: str, fix: str,
               error: type[KernelEvoError] = KernelEvoError, empty_ok: bool = False) -> Path:
    """`path` when it is a regular file to read; else `error`: "<what> <path> <problem>: <fix>"."""
    path = Path(path)
    problem = file_problem(path, empty_ok)
    if problem is not None:
        raise error(f"{what} {path} {problem}: {fix}")
    return path


def check_folder(path: str | Path, what: str, fix: str,
                 error: type[KernelEvoError] = KernelEvoError, missing_ok: bool = False) -> Path:
    """`path` when it is a folder (or, `missing_ok`, one that can be made); else `error`."""
    path = Path(path)
    problem = folder_problem(path, missing_ok)
    if problem is not None:
        raise error(f"{what} {path} {problem}: {fix}")
    return path


def read_text_file(path: str | Path, what: str, fix: str,
                   error: type[KernelEvoError] = KernelEvoError) -> str:
    """The text of a file `check_file` accepts; `error` naming it if it cannot be read."""
    path = check_file(path, what, fix, error)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}): "
                    f"{fix}") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}: {fix}") from None
