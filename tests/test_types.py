"""No type errors in src/kernelevo, as `mypy src/kernelevo --ignore-missing-imports` checks it.

Skipped where mypy is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "kernelevo"
_MESSAGE = re.compile(r"^(?P<path>[^:\n]+\.pyi?):\d+(?::\d+)?: (?P<kind>error|note): ")


@pytest.mark.slow
def test_mypy_finds_no_errors():
    pytest.importorskip("mypy")
    from mypy import api

    stdout, stderr, status = api.run([str(PACKAGE), "--ignore-missing-imports"])
    assert status in (0, 1), f"mypy did not run (exit {status}):\n{stderr}{stdout}"
    found = [(match["kind"], line) for line in stdout.splitlines()
             if (match := _MESSAGE.match(line))]
    # exit 1 with no error read: mypy's output changed form, and nothing here would be seen
    assert status == 0 or any(kind == "error" for kind, _ in found), stdout
    errors = sum(kind == "error" for kind, _ in found)
    assert not errors, f"{errors} mypy errors:\n" + "\n".join(line for _, line in found)
