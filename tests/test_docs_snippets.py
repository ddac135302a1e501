"""The docs' Python examples run as written, in a folder of their own.

Every ```python block of README.md and docs/*.md is meant to run; text that
only shows a call is written in prose or as an indented block. docs/api.md's
blocks judge and evolve, so tests/test_api.py runs them (marked slow); the
others run here, each file's blocks as one script.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
RUN_ELSEWHERE = {"api.md": "tests/test_api.py"}
STORED_RUNS = ("20261130-050454-task-3412", "20261130-054202-gemm-bias-relu-3c09")


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), re.S | re.M)


def docs_with_python() -> list[Path]:
    return [path for path in DOCS if python_blocks(path) and path.name not in RUN_ELSEWHERE]


def test_python_blocks_are_found_where_the_docs_have_them() -> None:
    assert python_blocks(ROOT / "docs/api.md") and python_blocks(ROOT / "docs/report.md")
    assert all(len(block.strip()) > 0 for path in DOCS for block in python_blocks(path))


@pytest.mark.parametrize("doc", docs_with_python(), ids=lambda path: path.name)
def test_a_docs_python_blocks_run_in_a_fresh_folder(doc: Path, tmp_path: Path) -> None:
    for run_id in STORED_RUNS:  # copies: a run read by a snippet stays as it was
        (tmp_path / "runs" / run_id).mkdir(parents=True)
        shutil.copy(ROOT / "bench/results/evolve/runs" / run_id / "run.db",
                    tmp_path / "runs" / run_id / "run.db")
    (tmp_path / "snippet.py").write_text("\n".join(python_blocks(doc)))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KERNELEVO_RUNS_DIR": "runs"}
    done = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    made = {path.name for path in tmp_path.iterdir()} - {"runs", "snippet.py"}
    assert made <= {"report.html", "comparison.html"}, made  # nothing else left behind
