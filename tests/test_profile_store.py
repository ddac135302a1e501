"""Profiles round-trip through run.db, `show --json` and `eval --json`, and print as a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rich.console import Console

from kernelevo.candidate import Candidate
from kernelevo.cli.profile import print_profile
from kernelevo.evaluate.analysis.profile import NO_GPU_NOTE, Profile
from kernelevo.evaluate.verdict import TimingStats, Verdict, verdict_for
from kernelevo.run.as_json import run_json
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT
from tests.test_profile_search import SEED, TASK_SOURCE, _profile


def _profiled_verdict() -> Verdict:
    time_ms, profile = _profile(0.41)
    return verdict_for("passed", timings={"candidate": TimingStats(time_ms, 0.001, time_ms, 20)},
                       speedup_vs_eager=1.3, profile=profile)


def test_a_profile_round_trips_through_the_run_store_and_show_json(tmp_path):
    verdict = _profiled_verdict()
    with RunStore.create(tmp_path, "add", TASK_SOURCE, {}) as store:
        candidate_id = store.add_candidate(Candidate(SEED, "triton", origin="seed"))
        store.record_verdict(candidate_id, verdict)
    with RunStore.open(next(tmp_path.glob("*/run.db"))) as store:
        again = store.candidate(candidate_id).verdict
        shown = json.loads(json.dumps(run_json(store)))
    assert again.profile == verdict.profile
    assert again == verdict
    assert Profile.from_dict(shown["best_verdict"]["profile"]) == verdict.profile


def test_eval_json_on_cpu_carries_a_profile_that_says_no_gpu():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "kernelevo.cli.app", "eval", str(ROOT / "tests/fixtures/tasks/add.py"),
         str(ROOT / "tests/fixtures/candidates/honest_add.py"), "--json", "--local"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = Verdict.from_dict(json.loads(done.stdout))
    assert verdict.profile == Profile(notes=(NO_GPU_NOTE,))


def test_the_profile_table_names_kernels_diagnosis_and_roofline():
    console = Console(record=True, width=160)
    print_profile(console, _profiled_verdict().profile, full=True)
    text = console.export_text()
    assert "add_kernel *" in text and "4096x1x1" in text
    assert "memory-bound at 41 % of HBM peak: at most 2.4x left" in text
    assert "roofline: 1968 GB/s of 4800 (41 %)" in text
    assert "cost: 201,326,592 bytes" in text


def test_the_candidate_page_shows_the_breakdown_and_roofline_position(tmp_path):
    from kernelevo.report.detail import load_candidate_detail
    from kernelevo.report.html import render_candidate_page

    with RunStore.create(tmp_path, "add", TASK_SOURCE, {}) as store:
        candidate_id = store.add_candidate(Candidate(SEED, "triton", origin="seed"))
        store.record_verdict(candidate_id, _profiled_verdict())
    page = render_candidate_page(load_candidate_detail(next(tmp_path.glob("*/run.db")).parent,
                                                       candidate_id))
    profile_part = page.split("<h2>Profile</h2>", 1)[1]
    assert "memory-bound at 41 % of HBM peak: at most 2.4x left" in profile_part
    assert "1968 of 4800 GB/s (41 %)" in profile_part
    assert "<code>add_kernel</code> <span class=\"muted\">own</span>" in profile_part
    assert 'aria-label="84 %"' in profile_part and "4096x1x1" in profile_part
