"""No type errors in src/kernelevo, as `mypy src/kernelevo --ignore-missing-imports` checks it.

Five files are being changed elsewhere: their errors are let through for now
(UNCHECKED); every other file must be clean. Skipped where mypy is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "kernelevo"
UNCHECKED = {
    "src/kernelevo/evaluate/child/oracle.py",
    "src/kernelevo/evaluate/shared/messages.py",
    "src/kernelevo/evaluate/analysis/reference.py",
    "src/kernelevo/evaluate/parent/oracle_run.py",
    "src/kernelevo/evaluate/parent/outcome.py",
}
_MESSAGE = re.compile(r"^(?P<path>[^:\n]+\.pyi?):\d+(?::\d+)?: (?P<kind>error|note): ")


def _relative(path: str) -> str:
    """A reported file from the repository root (mypy names it from the working folder)."""
    resolved = Path(path).resolve()
    return resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else path


@pytest.mark.slow
def test_mypy_finds_no_errors():
    pytest.importorskip("mypy")
    from mypy import api

    stdout, stderr, status = api.run([str(PACKAGE), "--ignore-missing-imports"])
    assert status in (0, 1), f"mypy did not run (exit {status}):\n{stderr}{stdout}"
    found = [(match["kind"], _relative(match["path"]), line) for line in stdout.splitlines()
             if (match := _MESSAGE.match(line))]
    # exit 1 with no error read: mypy's output changed form, and nothing here would be seen
    assert status == 0 or any(kind == "error" for kind, _, _ in found), stdout
    messages = [(kind, line) for kind, path, line in found if path not in UNCHECKED]
    errors = sum(kind == "error" for kind, _ in messages)
    assert not errors, f"{errors} mypy errors:\n" + "\n".join(line for _, line in messages)
