"""The error hierarchy lives in one module, and every error crosses a process boundary."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from kernelevo import errors
from tests.test_import_graph import PACKAGE_ROOT

ERRORS_MODULE = PACKAGE_ROOT / "errors.py"


def _error_bases(tree: ast.Module) -> dict[str, list[str]]:
    return {node.name: [getattr(base, "id", "") for base in node.bases]
            for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def test_every_kernelevo_error_is_defined_in_errors_py():
    ours = set(_error_bases(ast.parse(ERRORS_MODULE.read_text())))
    elsewhere = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        if path == ERRORS_MODULE:
            continue
        for name, bases in _error_bases(ast.parse(path.read_text())).items():
            if set(bases) & ours:
                elsewhere.append(f"{path.relative_to(PACKAGE_ROOT)}: {name}")
    assert not elsewhere, f"define these in kernelevo/errors.py: {elsewhere}"


def _every_error() -> list[type[errors.KernelEvoError]]:
    found = [value for value in vars(errors).values()
             if isinstance(value, type) and issubclass(value, errors.KernelEvoError)]
    return sorted(found, key=lambda kind: kind.__name__)


def _example(kind: type[errors.KernelEvoError]) -> errors.KernelEvoError:
    if issubclass(kind, errors.DamagedStore):
        return kind(Path("/runs/r1/run.db"), "no candidates table")
    if issubclass(kind, errors.LLMEmptyAnswer):
        return kind("no content", 200, ("attempt",), (10, 0, 0.001))
    if issubclass(kind, errors.LLMError):
        return kind("server error", 503, ("attempt",))
    if issubclass(kind, errors.SettingError):
        return kind("measure", "expected one of gpu, call, got 'wall'", "timing")
    return kind("the value and the fix")


@pytest.mark.parametrize("kind", _every_error(), ids=lambda kind: kind.__name__)
def test_every_error_pickles_with_its_message_and_fields(kind):
    error = _example(kind)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is kind and str(again) == str(error)
    assert vars(again) == vars(error)
