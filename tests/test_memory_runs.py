"""Memory across runs, end to end: `kernelevo evolve` twice against the fake LLM server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelevo.memory.store import MemoryStore
from kernelevo.report import write_report
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT
from tests.fakes.openai_server import FakeOpenAIServer

TASK = ROOT / "tests/fixtures/tasks/add.py"
GOOD = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
BROKEN = GOOD.replace("tl.load(", "tl.lod(", 1)  # fails when the kernel runs
MEMORY_HEADING = "# Learned on similar tasks"


def fenced(source: str) -> str:
    return f"A kernel.\n\n```python\n{source}\n```\n"


def broken_first() -> object:
    """The first answer fails at run time; repairs and later prompts get working kernels."""
    answered: list[str] = []

    def answer(request: dict) -> str:
        prompt = request["messages"][-1]["content"]
        if "repair the parent" in prompt:
            return fenced(GOOD.replace("1024", "512"))
        answered.append(prompt)
        return fenced(BROKEN if len(answered) == 1 else GOOD)
    return answer


def resized_task(tmp_path: Path) -> Path:
    """The add task at other sizes: the same operator family, another task."""
    path = tmp_path / "add_small.py"
    path.write_text(TASK.read_text().replace("batch_size = 64", "batch_size = 24")
                    .replace("dim = 1000", "dim = 300"))
    return path


def evolve(tmp_path: Path, task: Path, server: FakeOpenAIServer, memory: Path, runs: str,
           *flags: str) -> RunStore:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KERNELEVO_MEMORY_DB": str(memory)}
    env.pop("OPENAI_BASE_URL", None)
    runs_dir = tmp_path / runs
    done = subprocess.run(
        [sys.executable, "-m", "kernelevo.cli.app", "evolve", str(task), "--model", "fake",
         "--base-url", server.base_url, "--runs-dir", str(runs_dir), "--llm-in-flight", "1",
         "--islands", "1", *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    return RunStore.open(next(runs_dir.glob("*/run.db")))


def first_prompt(server: FakeOpenAIServer) -> str:
    return server.requests[0].body["messages"][-1]["content"]


@pytest.mark.slow
def test_a_second_run_on_a_similar_task_starts_from_the_first_runs_kernel_and_lessons(tmp_path):
    memory_path = tmp_path / "memory.db"
    with FakeOpenAIServer(default=broken_first()) as server:
        first = evolve(tmp_path, TASK, server, memory_path, "runs1", "--candidates", "4")
    best = first.best()
    assert best is not None and best.candidate.backend == "triton"
    assert first.events("memory_recorded")[0].payload["fixes"] >= 1

    small = resized_task(tmp_path)
    with FakeOpenAIServer(default=lambda request: fenced(GOOD)) as server:
        second = evolve(tmp_path, small, server, memory_path, "runs2", "--candidates", "1")
        prompt = first_prompt(server)
    assert MEMORY_HEADING in prompt
    assert best.candidate.source.strip() in prompt
    assert "this change fixed it" in prompt and "runtime_error" in prompt
    (recalled,) = second.events("memory_recalled")
    assert recalled.payload["tasks"][0]["name"] == "add"
    assert recalled.payload["lessons"] and recalled.payload["lessons"] in prompt
    planted = [c for c in second.candidates() if c.candidate.name.startswith("memory ")]
    assert planted and all(c.verdict is not None for c in planted)  # judged afresh
    page = write_report(Path(second.path), tmp_path / "report.html").read_text()
    assert "Lessons in the prompts" in page and "this change fixed it" in page

    with FakeOpenAIServer(default=lambda request: fenced(GOOD)) as server:
        alone = evolve(tmp_path, small, server, memory_path, "runs3", "--candidates", "1",
                       "--no-memory")
        prompt = first_prompt(server)
    assert MEMORY_HEADING not in prompt and best.candidate.source.strip() not in prompt
    assert not alone.events("memory_recalled") and not alone.events("memory_recorded")
    assert not any(c.candidate.name.startswith("memory ") for c in alone.candidates())
    with MemoryStore(memory_path) as memory:
        assert sorted(task.name for task in memory.tasks()) == ["add", "add_small"]
