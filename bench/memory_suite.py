"""Memory across runs on a suite of related tasks, with a scripted fake LLM, on the CPU.

Six small tasks, two sizes each of three operator families (elementwise add,
row sum, softmax; bench/memory_tasks/), each searched by `kernelevo evolve`
three times over:

  without   --no-memory: nothing recalled, nothing recorded
  with-1    memory on, starting from an empty store (a family's second task
            recalls its first)
  with-2    memory on again, the store as with-1 left it (every task recalls)

The fake LLM (tests/fakes) never reads the memory: it answers every family's
first prompt with a kernel that fails at run time, a repair with the working
kernel, and every later prompt with the working kernel. So its tokens measure
prompt sizes and call counts, not how well a model uses what it is shown; the
memory's gain measured here is what needs no model: a remembered kernel,
judged afresh, passing before the LLM's first answer does.

    .venv/bin/python bench/memory_suite.py [--out DIR] [--candidates 3] [--resume]

Each task's row is appended to DIR/rows.jsonl as it is measured; --resume
keeps those rows (and the memory store) and runs the tasks still missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from kernelevo.store.run_store import RunStore  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402

TASKS = ROOT / "bench/memory_tasks"
KERNELS = {"add": ROOT / "tests/fixtures/candidates/honest_add.py",
           "rowsum": ROOT / "examples/row_sum/triton_candidate.py",
           "softmax": ROOT / "examples/softmax/triton_candidate.py"}
ORDER = ("add_a", "add_b", "rowsum_a", "rowsum_b", "softmax_a", "softmax_b")
PASSES = (("without", ["--no-memory"]), ("with-1", []), ("with-2", []))


def scripted(family: str):
    """The fake LLM's answers for a family: broken first, then the working kernel."""
    good = KERNELS[family].read_text()
    broken = good.replace("tl.load(", "tl.lod(", 1)
    asked: list[int] = []

    def answer(request: dict) -> str:
        prompt = request["messages"][-1]["content"]
        if "repair the parent" in prompt:
            return f"Fixed.\n\n```python\n{good}\n```\n"
        asked.append(1)
        return f"A kernel.\n\n```python\n{broken if len(asked) == 1 else good}\n```\n"
    return answer


def run_task(task: str, flags: list[str], runs_dir: Path, memory_db: Path,
             candidates: int, config: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KERNELEVO_MEMORY_DB": str(memory_db),
           "TRITON_INTERPRET": "1"}
    env.pop("OPENAI_BASE_URL", None)
    started = time.monotonic()
    with FakeOpenAIServer(default=scripted(task.split("_")[0])) as server:
        done = subprocess.run(
            [sys.executable, "-m", "kernelevo.cli.app", "evolve", str(TASKS / f"{task}.py"),
             "--model", "fake", "--base-url", server.base_url, "--runs-dir", str(runs_dir),
             "--candidates", str(candidates), "--llm-in-flight", "1", "--islands", "1",
             "--device", "cpu", "--config", str(config), *flags],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{task}: evolve exited {done.returncode}:\n{done.stderr[-3000:]}")
    with RunStore.open(next(runs_dir.glob("*/run.db"))) as store:
        return measure(store, task, time.monotonic() - started)


def measure(store: RunStore, task: str, wall_s: float) -> dict:
    """Tokens and calls in all, and before the first passing kernel; what memory gave."""
    calls = store.llm_calls()
    passed = sorted((c for c in store.candidates() if c.verdict is not None
                     and c.verdict.status == "ok" and c.candidate.backend == "triton"),
                    key=lambda c: c.evaluated_at)
    first = passed[0] if passed else None
    before = [c for c in calls if first is not None and c.started_at < first.evaluated_at]
    recalled = store.events("memory_recalled")
    payload = recalled[-1].payload if recalled else {}
    totals = store.totals()
    return {
        "task": task, "run": store.run_id, "wall_s": round(wall_s, 1),
        "llm_calls": len(calls), "tokens": totals.tokens_in + totals.tokens_out,
        "prompt_tokens": totals.tokens_in,
        "tokens_before_first_pass": sum(c.input_tokens + c.output_tokens for c in before),
        "calls_before_first_pass": len(before),
        "first_pass": _origin(first),
        "passing_kernels": len(passed),
        "recalled": [f"{t['name']} ({t['similarity']:.0%})" for t in payload.get("tasks", [])],
        "planted": [f"memory kernel {k['memory_id']} from {k['task_name']}"
                    for k in payload.get("kernels", [])],
        "lesson_lines": len(payload.get("lessons", "").splitlines()),
        "lessons_bytes": payload.get("lessons_bytes", 0),
    }


def _origin(stored) -> str:
    if stored is None:
        return "none"
    if stored.candidate.name.startswith("memory "):
        return "memory kernel"
    return stored.candidate.origin


def table(rows: list[dict]) -> str:
    header = ("| pass | task | recalled (similarity) | kernels planted | lesson lines | "
              "first pass from | calls before it | tokens before it | LLM calls | tokens | "
              "wall s |")
    lines = [header, "|" + " --- |" * 11]
    for row in rows:
        lines.append(
            f"| {row['pass']} | {row['task']} | {', '.join(row['recalled']) or '-'} | "
            f"{len(row['planted'])} | {row['lesson_lines']} | {row['first_pass']} | "
            f"{row['calls_before_first_pass']} | {row['tokens_before_first_pass']:,} | "
            f"{row['llm_calls']} | {row['tokens']:,} | {row['wall_s']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/memory_2026-12-02")
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--resume", action="store_true", help="keep the rows measured")
    args = parser.parse_args()
    if args.out.exists() and not args.resume:
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    progress = args.out / "rows.jsonl"
    rows = [json.loads(line) for line in progress.read_text().splitlines()] \
        if progress.exists() else []
    done = {(row["pass"], row["task"]) for row in rows}
    memory_db = args.out / "memory.db"
    # One candidate waiting per judge: the next prompt is sent once the one before is being
    # judged, so a failure's repair comes within a small candidate budget.
    config = args.out / "kernelevo.toml"
    config.write_text("[search]\nqueued_per_worker = 1\n")
    for name, flags in PASSES:
        for task in ORDER:
            if (name, task) in done:
                continue
            runs_dir = args.out / "runs" / name / task
            shutil.rmtree(runs_dir, ignore_errors=True)  # a run that did not finish
            row = {"pass": name, **run_task(task, flags, runs_dir, memory_db, args.candidates,
                                            config)}
            rows.append(row)
            with progress.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    subprocess.run([sys.executable, "-m", "kernelevo.cli.app", "memory", "export", "-o",
                    str(args.out / "memory_export.json"), "--store", str(memory_db)],
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=True,
                   capture_output=True)
    summary = table(rows)
    (args.out / "table.md").write_text(summary + "\n")
    print(summary)


if __name__ == "__main__":
    main()
