"""What a sandboxed child may say back: no secret, no judge's code.

Secrets are environment variables whose names say so (keys, tokens,
passwords; plus any name registered with `hide_variable`, such as the
configured API-key variable) and the evaluation service's token. Children
start with an allow-list of variables that leaves them out
(environment.py), and their values are replaced in everything a child
reports, as a second line behind the filesystem confinement (confine.py):
in `evolve` a verdict's message and log go to the LLM's provider.
"""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any, Iterable, Mapping

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
_MIN_SECRET_CHARS = 16  # keys and tokens are longer; shorter values are ordinary words
SHOWN = "[redacted]"
_hidden: set[str] = set()
_HARNESS = str(Path(__file__).resolve().parent.parent) + os.sep  # kernelevo's own code


def hide_variable(name: str) -> None:
    """Treat the variable `name` as a secret too (an API key under a name of its own)."""
    if name:
        _hidden.add(name)


def is_secret(name: str) -> bool:
    return name in _hidden or bool(_SECRET_NAME.search(name))


def secret_values(environment: Mapping[str, str], folders: Iterable[Path] = ()) -> list[str]:
    """Values to redact: secret variables' and the service tokens recorded in `folders`."""
    found = {value for name, value in environment.items() if is_secret(name)}
    for folder in folders:
        try:
            found.add(str(json.loads((folder / "service.json").read_text())["token"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    # Longest first, so a value that contains another is replaced whole.
    return sorted((v for v in found if len(v) >= _MIN_SECRET_CHARS), key=len, reverse=True)


def redact(value: Any, secrets: list[str]) -> Any:
    """`value` (text, or lists and dicts of it) with every secret replaced."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, SHOWN)
        return value
    if isinstance(value, list):
        return [redact(item, secrets) for item in value]
    if isinstance(value, dict):
        return {key: redact(item, secrets) for key, item in value.items()}
    return value


def candidate_traceback(exc: BaseException, limit_lines: int = 30,
                        limit_chars: int = 6000) -> str:
    """The traceback of what the candidate raised, trimmed to its own part.

    The judge's frames are left out and library frames keep only their place
    (file below site-packages, line, function), without their source lines:
    the candidate's author needs its own lines and the error, not the judge's
    machine. Chained exceptions are kept, as Python prints them.
    """
    parts: list[str] = []
    for number, error in enumerate(_chain(exc)):
        if number:
            parts.append("\nDuring handling of the above exception, another exception "
                         "occurred:\n" if error.__cause__ is None else
                         "\nThe above exception was the direct cause of the following "
                         "exception:\n")
        parts += _frames(error)
        parts += [line.rstrip("\n") for line in
                  traceback.format_exception_only(type(error), error)]
    text = "\n".join("\n".join(parts).splitlines()[-limit_lines:])
    return text[-limit_chars:]


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, oldest first."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in found):
        found.append(current)
        current = current.__cause__ or (None if current.__suppress_context__
                                        else current.__context__)
    return found[::-1]


def _frames(error: BaseException) -> list[str]:
    lines = []
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename.startswith(_HARNESS):
            continue
        library = _library_path(frame.filename)
        shown = library or os.path.basename(frame.filename)
        lines.append(f'  File "{shown}", line {frame.lineno}, in {frame.name}')
        if not library and frame.line:
            lines.append(f"    {frame.line.strip()}")
    return ["Traceback (most recent call last):"] + lines if lines else []


def _library_path(filename: str) -> str | None:
    """`filename` shortened below the installed libraries' folder, or None if not a library's."""
    for root in _library_roots():
        if filename.startswith(root):
            return filename[len(root):]
    return None


def _library_roots() -> list[str]:
    paths = sysconfig.get_paths()
    roots = {paths.get("purelib", ""), paths.get("platlib", ""), paths.get("stdlib", ""),
             paths.get("platstdlib", "")}
    roots |= {entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))}
    return sorted((root.rstrip(os.sep) + os.sep for root in roots if root), key=len,
                  reverse=True)
