"""A synthetic run of N candidates, written through the store's API, and what it costs to show.

    python3 bench/scale_run.py [--candidates 50000] [--runs-dir DIR] [--json OUT]
    python3 bench/scale_run.py --run RUN_DIR [--json OUT]    # measure a run made before

Every candidate gets an LLM call (finished, failed or, for the last few,
still started as if cut off by a kill), a verdict of a realistic mix and a
few events, so the report, the status plot, the progress totals and resume
read a database shaped like a long search. Writes skip the fsync
(synchronous=OFF): a benchmark database needs no crash safety.

Measured (seconds unless named otherwise): the first open of the run (where
a newer KernelEvo adds its indexes, once), writing the report, the status
plot's SVG, the totals and best-kernel queries and the whole progress tick,
what resume reads, the start of a real resume (on a copy of run.db, since
resume writes), every kind of UI page served by `kernelevo ui` in its own
process (wall and server CPU seconds) with that process's peak memory, and
the first paint of the report and of the UI's run page in
headless Chromium (skipped, saying why, where Chromium or Playwright is
missing). `--run` reuses one generated run for every measurement; PYTHONPATH
picks the code measured (this file appends its own checkout's src).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Appended, so PYTHONPATH can point at another checkout (figures before a change).
sys.path.append(str(Path(__file__).resolve().parent.parent / "src"))

import kernelevo  # noqa: E402
from kernelevo.candidate import Candidate  # noqa: E402
from kernelevo.evaluate.verdict import TimingStats, verdict_for  # noqa: E402
from kernelevo.store.run_store import DB_NAME, RunStore  # noqa: E402

SEED_SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
PROMPT = {"messages": [{"role": "user", "content": "make it faster " * 200}]}
REPLY = "```python\n" + "x = x * 2  # a line of a kernel\n" * 60 + "```"
REASONS = ("passed",) * 5 + ("output_mismatch", "syntax_error", "forward_failed", "try_fallback")
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
PAGE_TIMEOUT_S = 300


def generate(runs_dir: Path, count: int, seed: int = 0) -> Path:
    """Write a run of `count` candidates; returns its run directory."""
    rng = random.Random(seed)
    config = {"search": {"backend": "triton", "islands": 3}, "budget": {"candidates": count}}
    with RunStore.create(runs_dir, "scale/add", "class Model: ...", config) as store:
        store._database.query("PRAGMA synchronous = OFF")
        speedup = 1.0
        for index in range(count):
            call = store.start_llm_call("gpt-x", PROMPT, max_output_tokens=8192,
                                        cost_bound_usd=0.08)
            source = f"{SEED_SOURCE}        return x * {index}\n"
            candidate_id = store.add_candidate(
                Candidate(source, "triton", name=f"variant {index}", origin="llm"),
                island=index % 3, cell=("triton", str(index % 4), index % 2 == 0))
            if index >= count - 4:
                continue  # in flight when the run was killed: no reply, no verdict
            if rng.random() < 0.05:
                store.fail_llm_call(call, "HTTP 500", input_tokens=3000)
            else:
                store.finish_llm_call(call, REPLY, 3000, 900, 0.004, 3.0,
                                      candidate_id=candidate_id)
            store.record_verdict(candidate_id, _verdict(rng, speedup))
            speedup += rng.random() * 0.001
            if index % 10 == 0:
                store.log_event("elite", {"candidate": candidate_id, "island": index % 3})
            if index % 25 == 0:
                store.log_event("elapsed", {"elapsed_s": float(index)})
        store.set_status("interrupted")
        return store.path.parent


def _verdict(rng: random.Random, speedup: float):
    reason = rng.choice(REASONS)
    if reason != "passed":
        return verdict_for(reason, "synthetic")
    own = 1.0 / (speedup * rng.uniform(0.5, 1.0))
    timings = {"candidate": TimingStats(own, 0.01, own * 0.95, 50),
               "eager": TimingStats(1.0, 0.01, 0.95, 50)}
    return verdict_for("passed", timings=timings, speedup_vs_eager=1.0 / own,
                       speedup_vs_compile=0.8 / own)


def _seconds(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(run_dir: Path, ui_repeats: int = 3) -> dict[str, Any]:
    """Seconds, bytes and megabytes of what a user waits for on a run this size."""
    from kernelevo.report import write_report
    from kernelevo.report.data import load_run
    from kernelevo.report.html import run_plots

    # Opened once first: a run made by an older KernelEvo gains its indexes here.
    figures: dict[str, Any] = {"first_open_s": _seconds(lambda: RunStore.open(run_dir).close())}
    report = run_dir / "report.html"
    cpu_before = time.process_time()
    figures["report_write_s"] = _seconds(lambda: write_report(run_dir, report))
    figures["report_write_cpu_s"] = time.process_time() - cpu_before
    figures["report_bytes"] = report.stat().st_size
    status = str(run_plots(load_run(run_dir))["status"])
    figures["status_plot_bytes"] = len(status.encode())
    figures["status_plot_steps"] = int(status.split('data-points="')[1].split('"')[0])
    figures.update(_store_queries(run_dir))
    figures["resume_open_s"] = _resume_open_s(run_dir)
    figures.update(_resume_start(run_dir))
    figures.update(_ui_figures(run_dir, ui_repeats))
    figures.update(_first_paint(report))
    return figures


def _store_queries(run_dir: Path) -> dict[str, float]:
    """Milliseconds of the totals, the best kernel and one whole progress tick."""
    from kernelevo.budget import Budget
    from kernelevo.search.config import SearchConfig
    from kernelevo.search.loop import Evolution

    with RunStore.open(run_dir) as store:
        totals_s = _seconds(lambda: [store.totals() for _ in range(20)]) / 20
        best_s = _seconds(lambda: [store.best() for _ in range(5)]) / 5
        evolution = Evolution(store, [], SearchConfig(), Budget(), proposer=None)

        def tick() -> None:
            evolution.progress.by_status = {}  # as after a new verdict: the best is looked up
            evolution._report()

        tick_s = _seconds(lambda: [tick() for _ in range(5)]) / 5
    return {"totals_ms": totals_s * 1000, "best_ms": best_s * 1000,
            "progress_tick_ms": tick_s * 1000}


def _resume_open_s(run_dir: Path) -> float:
    """What resume reads before its first new call: pending work, cut-off calls, ranking."""
    started = time.perf_counter()
    with RunStore.open(run_dir) as store:
        store.pending()
        store.interrupted_llm_calls()
        store.ranking()
        store.totals()
    return time.perf_counter() - started


def _resume_start(run_dir: Path) -> dict[str, float]:
    """`evolve --resume` up to its first proposal: budget, archive, queue, progress tick."""
    from kernelevo.run.setup import make_budget
    from kernelevo.search.config import SearchConfig
    from kernelevo.search.loop import Evolution

    with tempfile.TemporaryDirectory(prefix="kernelevo-resume-") as folder:
        copy = Path(folder) / run_dir.name
        copy.mkdir()
        for name in (DB_NAME, DB_NAME + "-wal"):
            if (run_dir / name).is_file():
                shutil.copyfile(run_dir / name, copy / name)
        RunStore.open(copy).close()  # the copy's own first open is not resume's work
        started, cpu_before = time.perf_counter(), time.process_time()
        with RunStore.open(copy) as store:
            limits = {"tokens": None, "usd": None, "candidates": None, "wall_s": None}
            budget = make_budget(limits, store)
            evolution = Evolution(store, [], SearchConfig(), budget, proposer=None)
            evolution.resume()
            evolution._report()
        return {"resume_start_s": time.perf_counter() - started,
                "resume_start_cpu_s": time.process_time() - cpu_before}


@contextmanager
def _ui_server(runs_dir: Path) -> Iterator[tuple[str, int]]:
    """`kernelevo ui` over `runs_dir` in its own process; yields its URL and pid."""
    environment = dict(os.environ, PYTHONPATH=str(Path(kernelevo.__file__).parent.parent))
    process = subprocess.Popen(
        [sys.executable, "-m", "kernelevo.cli.app", "ui", "--runs-dir", str(runs_dir), "--port", "0"],
        env=environment, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = re.search(r"http://[\d.]+:\d+", line)
        if not found:
            raise RuntimeError(f"the UI did not start: {line}{process.stderr.read()}")
        # Drained, so tracebacks from a failing page cannot fill the pipe and stall it.
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield found.group(), process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def _ui_figures(run_dir: Path, repeats: int) -> dict[str, Any]:
    """Seconds per UI page (first fetch and median of `repeats`) and the server's peak MB."""
    with RunStore.open(run_dir) as store:
        run_id, best = store.run_id, store.ranking().best
    pages = {"index": "/", "run": f"/run/{run_id}", "summary": f"/api/run/{run_id}/summary",
             "candidate_best": f"/run/{run_id}/candidate/{best.id if best else 'c0001'}",
             "candidate_first": f"/run/{run_id}/candidate/c0001",
             "compare": f"/compare?runs={run_id}"}
    figures: dict[str, Any] = {}
    with _ui_server(run_dir.parent) as (url, pid):
        for name, path in pages.items():
            times, cpu = [], []
            for _ in range(repeats):
                cpu_before = _cpu_s(pid)
                times.append(_seconds(lambda: _fetch(url + path)))
                cpu.append(_cpu_s(pid) - cpu_before)
            figures[f"ui_{name}_first_s"] = times[0]
            figures[f"ui_{name}_median_s"] = statistics.median(times)
            figures[f"ui_{name}_cpu_median_s"] = statistics.median(cpu)
        figures["ui_peak_rss_mb"] = _peak_rss_mb(pid)
        figures.update(_first_paint_of(url + pages["run"], "ui_run_page"))
    return figures


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=PAGE_TIMEOUT_S) as response:
        return response.read()


def _cpu_s(pid: int) -> float:
    """CPU seconds the process has used (user and system, 10 ms steps): a page's cost
    apart from the other jobs that share the machine and stretch its wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def _first_paint(report: Path) -> dict[str, Any]:
    return _first_paint_of(report.resolve().as_uri(), "report")


def _first_paint_of(url: str, name: str) -> dict[str, Any]:
    """First contentful paint and load of `url` in headless Chromium, ms (median of 3)."""
    reason = _no_browser()
    if reason:
        print(f"skipped the first paint of the {name}: {reason}", file=sys.stderr)
        return {f"{name}_first_paint_skipped": reason}
    from playwright.sync_api import sync_playwright

    paints, loads = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for _ in range(3):
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT_S * 1000)
                page.wait_for_function(
                    "performance.getEntriesByName('first-contentful-paint').length > 0")
                paint, load = page.evaluate(
                    "() => [performance.getEntriesByName('first-contentful-paint')[0].startTime,"
                    " performance.getEntriesByType('navigation')[0].loadEventEnd]")
                paints.append(paint)
                loads.append(load)
                page.close()
        finally:
            browser.close()
    return {f"{name}_first_paint_ms": statistics.median(paints),
            f"{name}_load_ms": statistics.median(loads)}


def _no_browser() -> str:
    """Why the first paint cannot be measured here; "" when it can."""
    if not CHROMIUM.is_file():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no Playwright (pip install playwright; its own browser download is not needed)"
    return ""


def _code_version() -> str:
    """The commit of the KernelEvo measured, where it is a git checkout."""
    source = Path(kernelevo.__file__).parent
    commit = subprocess.run(["git", "-C", str(source), "log", "-1", "--format=%h %s"],
                            capture_output=True, text=True)
    if commit.returncode != 0:
        return str(source)
    changed = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "."],
                             capture_output=True, text=True).stdout.strip()
    return commit.stdout.strip() + (" (with uncommitted changes)" if changed else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=50_000)
    parser.add_argument("--runs-dir", type=Path, default=None)
    parser.add_argument("--run", type=Path, default=None, help="measure this run, generate none")
    parser.add_argument("--ui-repeats", type=int, default=3, help="fetches of each UI page")
    parser.add_argument("--label", default=None, help="names the code measured in the JSON "
                        "(default: its git commit)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="kernelevo-scale-"))
    if args.run is None:
        started = time.perf_counter()
        run_dir = generate(runs_dir, args.candidates)
        generate_s = time.perf_counter() - started
    else:
        run_dir, generate_s = args.run.resolve(), 0.0
    figures = measure(run_dir, args.ui_repeats)
    with RunStore.open(run_dir) as store:
        candidates = sum(store.totals().candidates_by_status.values())
    result = {"candidates": candidates, "run": str(run_dir), "generate_s": generate_s,
              "code": args.label or _code_version(), **figures}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
