"""The HTML report and run comparison, read from real stored runs.

Two runs: one made by the real search on CPU (tuner only, judged under the
Triton interpreter, so no timings), and one written through RunStore with
timed verdicts and LLM calls, so the plots have numbers to draw.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import TimingStats, Verdict, verdict_for
from kernelevo.report import units, write_comparison, write_report
from kernelevo.report.diff import diff_counts
from kernelevo.report.highlight import highlight, tokens
from kernelevo.report.svg import NO_TIMINGS, nice_ticks
from kernelevo.store.run_store import RunStore
from kernelevo.store.listing import list_runs
from tests.conftest import ROOT

TIMED_RUN_ID = "20260101-000000-add-timed"
HONEST_ADD = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
ADD_TASK = (ROOT / "tests/fixtures/tasks/add.py").read_text()
GPU_ENVIRONMENT = {"device": "cuda", "gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0",
                   "precision": "fp32", "policy": "default"}


# -- the runs ------------------------------------------------------------------


def make_runs(runs_dir: Path) -> dict[str, Path]:
    """The real CPU run and the synthetic timed run, made once per test session."""
    if not runs_dir.is_dir():
        runs_dir.mkdir(parents=True)
        _run_real_search(runs_dir)
        make_timed_run(runs_dir)
    summaries = {summary.run_id: summary.path for summary in list_runs(runs_dir)}
    timed = summaries.pop(TIMED_RUN_ID)
    return {"dir": runs_dir, "cpu": next(iter(summaries.values())), "timed": timed}


def _run_real_search(runs_dir: Path) -> None:
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TRITON_INTERPRET="1")
    result = subprocess.run(
        [sys.executable, "-m", "kernelevo.cli.app", "evolve", "tests/fixtures/tasks/add.py",
         "--seed", "tests/fixtures/candidates/honest_add.py", "--candidates", "3",
         "--runs-dir", str(runs_dir)],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def timed_verdict(own_ms: float, eager_ms: float = 2.0, compile_ms: float = 1.5) -> Verdict:
    timings = {"candidate": TimingStats(own_ms, own_ms * 0.04, own_ms * 0.95, 60),
               "eager": TimingStats(eager_ms, 0.05, eager_ms * 0.97, 60),
               "compile": TimingStats(compile_ms, 0.04, compile_ms * 0.97, 60)}
    return verdict_for("passed", timings=timings, speedup_vs_eager=eager_ms / own_ms,
                       speedup_vs_compile=compile_ms / own_ms, environment=GPU_ENVIRONMENT,
                       isolation="own process group", phases_s={"timing": 1.5},
                       notes=("own kernels: 97% of GPU kernel time",))


def _llm_call(store: RunStore, mode: str, parent: str, answer: str, tokens_in: int,
              tokens_out: int, cost_usd: float) -> int:
    messages = [{"role": "system", "content": "You write fast Triton kernels."},
                {"role": "user", "content": f"Improve candidate {parent} ({mode})."}]
    call = store.start_llm_call("fake-model", {"mode": mode, "parent": parent,
                                               "messages": messages}, max_output_tokens=4096)
    store.finish_llm_call(call, answer, tokens_in, tokens_out, cost_usd, latency_s=3.5)
    return call


def _add(store: RunStore, source: str, backend: str, name: str, origin: str,
         parents: tuple[str, ...], cell: tuple, island: int = 0) -> str:
    candidate = Candidate(source, backend, name=name, origin=origin, parent_ids=parents)
    return store.add_candidate(candidate, island=island, cell=cell, parent_ids=parents)


def make_timed_run(runs_dir: Path) -> Path:
    """A run as a GPU search with an LLM would leave it: timings, tokens and dollars."""
    config = {"search": {"backend": "triton", "islands": 2, "migration_interval": 0},
              "llm": {"models": {"fake-model": 1.0}},
              "budget": {"tokens": 100_000, "usd": 1.0, "wall_s": 3600, "candidates": 10}}
    store = RunStore.create(runs_dir, "add", ADD_TASK, config, run_id=TIMED_RUN_ID)
    triton_cell = ("triton", "1", False, "direct", "medium")
    reference = ADD_TASK.replace("class Model(", "class ModelNew(")
    seed = _add(store, reference, "pytorch", "reference", "seed", (),
                ("pytorch", "0", False, "direct", "unknown"))
    store.record_verdict(seed, timed_verdict(2.0))
    kernel = _add(store, HONEST_ADD, "triton", "honest_add", "seed", (), triton_cell, island=1)
    store.record_verdict(kernel, timed_verdict(1.6))
    broken_source = HONEST_ADD.replace("x + y, mask=mask)", "x + y + z, mask=mask)")
    call = _llm_call(store, "rewrite", kernel, f"```python\n{broken_source}```", 1200, 800, 0.012)
    broken = _add(store, broken_source, "triton", "llm-rewrite", "llm", (kernel,), triton_cell,
                  island=1)
    store.link_llm_call(call, broken)
    store.record_verdict(broken, verdict_for("compile_failed", "NameError: z is not defined",
                                             logs="Traceback: NameError: name 'z' is not defined"))
    fixed_source = HONEST_ADD.replace("    n = x.numel()\n", "    n = x.numel()  # one launch\n")
    call = _llm_call(store, "repair", broken, f"```python\n{fixed_source}```", 1500, 900, 0.018)
    fixed = _add(store, fixed_source, "triton", "llm-repair", "repair", (broken,), triton_cell,
                 island=1)
    store.link_llm_call(call, fixed)
    store.record_verdict(fixed, timed_verdict(1.0))
    tuned_source = fixed_source.replace("1024", "2048")
    tuned = _add(store, tuned_source, "triton", "BLOCK 1024->2048", "tuner", (fixed,),
                 ("triton", "1", False, "direct", "large"), island=1)
    store.record_verdict(tuned, timed_verdict(0.8))
    _add(store, tuned_source.replace("2048", "4096"), "triton", "BLOCK 2048->4096", "tuner",
         (tuned,), ("triton", "1", False, "direct", "large"), island=1)  # still pending
    store.log_event("elapsed", {"elapsed_s": 42.0})
    store.log_event("stop", {"reason": "token budget spent"})
    store.set_status("finished")
    store.close()
    return runs_dir / TIMED_RUN_ID


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_runs(tmp_path_factory.getbasetemp() / "report-runs")


# -- helpers -------------------------------------------------------------------


def section(page: str, element_id: str) -> str:
    """The HTML of the element with this id, up to its section's end."""
    start = page.index(f'id="{element_id}"')
    return page[start:page.index("</section>", start)]


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def plot(page: str, title: str) -> str:
    match = re.search(rf"<svg[^>]*aria-label=\"{re.escape(title)}\".*?</svg>", page, re.S)
    assert match, f"no plot titled {title!r}"
    return match.group()


def points_of(svg: str) -> int:
    return int(re.search(r'data-points="(\d+)"', svg).group(1))


def external_references(page: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*""", page) + \
        re.findall(r"url\(\s*['\"]?(?:https?:)?//", page) + re.findall(r"@import", page)


# -- the report of the real CPU run --------------------------------------------


def test_report_of_a_real_cpu_run(runs, tmp_path):
    output = write_report(runs["cpu"], tmp_path / "out" / "report.html")
    page = output.read_text()
    with RunStore.open(runs["cpu"]) as store:
        info = store.run_info()
        candidates = store.candidates()
    # Without timings the best is the first passing Triton kernel judged, not the seed.
    kernels = [c for c in candidates if c.verdict.ok and c.candidate.backend == "triton"]
    best = min(kernels, key=lambda c: (c.evaluated_at, c.sequence))
    assert info.task_name in page and info.id in page
    assert "triton" in section(page, "summary") and "tuner only" in page
    # Said once, plainly: what was checked and what was not measured.
    assert text_of(page).count("Judged without a GPU") == 1
    assert "the run's best, and each archive cell's elite, is the first correct kernel judged" in text_of(page)
    baseline = text_of(section(page, "summary"))
    assert "baseline" in baseline and "c0001 (PyTorch seed): ok" in baseline
    best_section = section(page, "best")
    assert f"Best kernel: {best.id}" in best_section
    code = best_section[best_section.index('id="best-code"'):]
    code = code[:code.index("</pre>")]
    assert text_of(code.split(">", 1)[1]).strip() == best.candidate.source.strip()
    parents = best.candidate.parent_ids
    assert (f"--- {parents[0]}" in best_section if parents
            else "a starting candidate: no parent" in best_section)
    assert "starting point" in best_section
    for field in ("passed", "isolation", "environment", "timings unavailable: no GPU"):
        assert field in best_section


def test_report_is_self_contained(runs, tmp_path):
    page = write_report(runs["cpu"], tmp_path / "report.html").read_text()
    assert external_references(page) == []
    assert "<script" not in page  # the file needs no script; only the live UI polls
    assert "<link" not in page


def test_cpu_run_shows_no_empty_speedup_plots_and_no_speedups_it_did_not_measure(runs,
                                                                                tmp_path):
    page = write_report(runs["cpu"], tmp_path / "report.html").read_text()
    assert page.count("<svg") >= 1 + 3  # the status plot and one grid per island
    assert "best-so-far speedup" not in page and NO_TIMINGS not in page
    assert points_of(plot(page, "candidates by status over time")) > 0
    archive = section(page, "archive")
    assert "1.00x" not in archive and " correct" in archive  # untimed elites are correct
    assert "False" not in archive and "True" not in archive  # words, not raw flags
    assert "<polygon" in plot(page, "candidates by status over time")


# -- the report of the timed run -----------------------------------------------


def test_timed_report_plots_best_so_far_against_spend(runs, tmp_path):
    page = write_report(runs["timed"], tmp_path / "timed.html").read_text()
    for title in ("tokens", "dollars", "wall time"):
        svg = plot(page, f"best-so-far speedup against {title}")
        # vs eager: 1.25x, 2.0x, 2.5x; vs compile: 0.9375x, 1.5x, 1.875x. The
        # PyTorch seed's 1.0x is the baseline, never a best-so-far point.
        assert points_of(svg) == 6
        polylines = re.findall(r'<polyline[^>]*points="([^"]+)"', svg)
        assert len(polylines) == 2 and all(len(p.split()) >= 5 for p in polylines)
    assert "c0005 2.5x" in page  # a point's tooltip
    grids = re.findall(r'<svg class="cells".*?</svg>', page, re.S)
    assert len(grids) == 2 and "c0005" in grids[1] and "✕1" in grids[1]


def test_timed_report_summary_and_best(runs, tmp_path):
    page = write_report(runs["timed"], tmp_path / "timed.html").read_text()
    summary = text_of(section(page, "summary"))
    assert "2.50x" in summary and "1.88x" in summary  # vs eager, vs torch.compile
    assert "IQR range" in summary and "fake-model" in summary
    assert "NVIDIA H200" in summary and "triton 3.6.0" in summary
    assert "4,400" in summary and "$0.0300" in summary and "42s" in summary
    assert "c0001 (PyTorch seed): ok, 1.00x vs eager; the PyTorch reference" in summary
    best = section(page, "best")
    assert "repair of compile_failed" in best and "tuned BLOCK 1024-&gt;2048" in best
    assert "+25.0%" in best and "+60.0%" in best  # gains over the last timed ancestor
    assert "+        add_kernel[grid](x, y, out, n, BLOCK=2048)" in text_of(best)
    timings = text_of(best[best.index("<h3>Timings"):])
    assert "compile" in timings and "0.8000 ms" in timings
    candidates = text_of(section(page, "candidates"))
    assert "pending" in candidates and "compile_failed" in candidates


def test_comparison_has_both_runs(runs, tmp_path):
    output = write_comparison([runs["cpu"], runs["timed"]], tmp_path / "compare.html")
    page = output.read_text()
    assert runs["cpu"].name in page and TIMED_RUN_ID in page
    svg = plot(page, "best-so-far speedup vs eager against tokens")
    assert points_of(svg) == 3 and "<polyline" in svg
    assert "no timings" in page and "2.50x" in page
    assert external_references(page) == []


# -- building blocks -----------------------------------------------------------


def test_highlight_keeps_the_source_and_marks_tokens():
    source = 'import torch\n\n@triton.jit\ndef f(x):  # "not a string"\n    return x + 0x1F\n' \
             's = """line\n<two>"""\n'
    assert "".join(text for _, text in tokens(source)) == source
    kinds = {text: kind for kind, text in tokens(source)}
    assert kinds["import"] == "keyword" and kinds["f"] == "definition"
    assert kinds['# "not a string"'] == "comment" and kinds["0x1F"] == "number"
    assert kinds["@triton.jit"] == "decorator" and kinds['"""line\n<two>"""'] == "string"
    rendered = highlight(source)
    assert rendered.count('<span class="line">') == source.count("\n")
    assert "&lt;two&gt;" in rendered and "<two>" not in rendered


def test_diff_counts_and_ticks():
    assert diff_counts("a\nb\nc\n", "a\nB\nc\nd\n") == (2, 1)
    assert nice_ticks(0, 2.6) == [0, 1, 2, 3]
    assert nice_ticks(0.3, 2.4) == [0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert nice_ticks(0, 0) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]


def test_units():
    assert units.tokens(1_234_567) == "1.23M" and units.tokens(45_000) == "45k"
    assert units.usd(0.0123) == "$0.0123" and units.usd(12.5) == "$12.50"
    assert units.duration(42) == "42s" and units.duration(3725) == "1h 02m"
    assert units.speedup(None) == "-" and units.speedup(2.5) == "2.50x"


def test_a_run_just_started_renders(tmp_path):
    with RunStore.create(tmp_path, "add", ADD_TASK, {}, run_id="fresh") as store:
        empty = write_report(tmp_path / "fresh", tmp_path / "empty.html").read_text()
        store.add_candidate(Candidate(HONEST_ADD, "triton", "honest_add", "seed"))
        pending = write_report(tmp_path / "fresh", tmp_path / "pending.html").read_text()
    assert "no candidates yet" in empty and "no passing custom kernel yet" in empty
    assert "pending" in text_of(section(pending, "candidates"))
    assert "no passing custom kernel yet: 0 of 0 judged candidates failed, 1 not judged yet" \
        in pending and pending.count("<svg") >= 4
