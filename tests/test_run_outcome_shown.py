"""A run that ended `llm_failed`, and charges that are estimates, as every view shows them.

`runs`, `show`, their `--json`, the HTML report and the UI all read one
RunStore: a run stopped by its LLM shows `llm_failed`, not `finished`, and
tokens charged as a worst case are shown apart from billed ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kernelevo.cli.app import app
from kernelevo.report.server import route
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT
from tests.fakes import FakeOpenAIServer, Status

TASK = ROOT / "tests/fixtures/tasks/add.py"
FAST_LLM = ("[llm]\nbackoff_base_s = 0.01\nbackoff_max_s = 0.05\nmax_attempts = 2\n"
            "breaker_failures = 3\nbreaker_min_s = 0\n")


def cli(runs_dir: Path, *args: str):
    return CliRunner().invoke(app, [*args, "--runs-dir", str(runs_dir)],
                              env={"COLUMNS": "200", "NO_COLOR": "1"})


def ui(runs_dir: Path, path: str) -> str:
    return route(runs_dir, path, {}).body.decode()


def test_a_run_ended_by_a_429_for_ever_shows_llm_failed_everywhere(tmp_path):
    config = tmp_path / "k.toml"
    config.write_text(FAST_LLM)
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    env.pop("OPENAI_BASE_URL", None)
    with FakeOpenAIServer(default=Status(429)) as server:
        done = subprocess.run(
            [sys.executable, "-m", "kernelevo.cli.app", "evolve", str(TASK), "--model", "m",
             "--base-url", server.base_url, "--runs-dir", str(runs), "--config", str(config),
             "--device", "cpu", "--no-compile", "--json"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-2000:]
    assert json.loads(done.stdout)["outcome"] == "llm_failed"
    assert "the run ended with llm_failed" in done.stderr and "HTTP 429" in done.stderr
    (run_dir,) = runs.iterdir()
    run_id = run_dir.name

    listed = cli(runs, "runs")
    assert listed.exit_code == 0 and f"{run_id}  add   llm_failed" in listed.output
    assert json.loads(cli(runs, "runs", "--json").output)[0]["status"] == "llm_failed"
    shown = cli(runs, "show", run_id)
    assert f"run {run_id}  task add  status llm_failed" in shown.output
    assert json.loads(cli(runs, "show", run_id, "--json").output)["status"] == "llm_failed"
    report = tmp_path / "report.html"
    assert cli(runs, "report", run_id, "-o", str(report)).exit_code == 0
    assert 'status <span data-live="status">llm_failed</span>' in report.read_text()
    assert json.loads(ui(runs, f"/api/run/{run_id}/summary"))["status"] == "llm_failed"
    assert "<td>llm_failed</td>" in ui(runs, "/")


def make_run_with_estimates(runs_dir: Path) -> str:
    """A run with one billed call, one cut off (worst case) and one with implausible usage."""
    with RunStore.create(runs_dir, "add", TASK.read_text(), {}) as store:
        billed = store.start_llm_call("m", {"messages": []}, max_output_tokens=100,
                                      cost_bound_usd=0.01)
        store.finish_llm_call(billed, "answer", 300, 50, 0.002, 1.0)
        cut = store.start_llm_call("m", {"messages": []}, max_output_tokens=100,
                                   cost_bound_usd=0.01)
        store.fail_llm_call(cut, "cancelled (charged the call's worst case)", 900, 100, 0.01)
        lied = store.start_llm_call("m", {"messages": []}, max_output_tokens=100,
                                    cost_bound_usd=0.01)
        store.finish_llm_call(lied, "answer", 900, 100, 0.01, 1.0,
                              note="the server reported -570,000 input tokens")
        store.set_status("finished")
        return store.run_id


def test_estimated_tokens_are_shown_apart_from_billed_ones(tmp_path):
    runs = tmp_path / "runs"
    run_id = make_run_with_estimates(runs)
    with RunStore.open(runs / run_id) as store:
        totals = store.totals()
    assert (totals.tokens_in + totals.tokens_out, totals.estimated_tokens) == (2350, 2000)
    assert totals.billed_tokens == 350 and abs(totals.estimated_usd - 0.02) < 1e-9

    assert "2,350 (2,000 est.)" in cli(runs, "runs").output
    shown = cli(runs, "show", run_id).output
    assert "of which billed 350 tokens; estimated 2,000 tokens, $0.0200" in shown
    facts = json.loads(cli(runs, "show", run_id, "--json").output)
    assert (facts["estimated_tokens"], facts["tokens_in"] + facts["tokens_out"]) == (2000, 2350)
    report = tmp_path / "report.html"
    assert cli(runs, "report", run_id, "-o", str(report)).exit_code == 0
    assert "2,000 tokens, $0.0200 estimated" in " ".join(report.read_text().split())
    assert "2,350 (2,000 est.)" in ui(runs, "/")


def test_a_resumed_run_says_how_much_of_its_spend_is_estimated(tmp_path):
    from kernelevo.run.driver import spent_notice

    runs = tmp_path / "runs"
    run_id = make_run_with_estimates(runs)
    with RunStore.open(runs / run_id) as store:
        text = spent_notice(store, {"tokens": 100_000})
    assert f"run {run_id} has been charged 2,350 tokens of a budget of 100,000" in text
    assert "2,000 of them estimated" in text and "raise --tokens" in text
