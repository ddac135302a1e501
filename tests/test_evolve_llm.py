"""End-to-end evolve runs against a fake OpenAI-compatible server on real sockets."""

import json
import os
import subprocess
import sys

import pytest

from kernelevo.store import RunStore
from tests.conftest import ROOT
from tests.fakes.openai_server import Delay, FakeOpenAIServer, Status

TASK = ROOT / "tests/fixtures/tasks/add.py"
GOOD = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
BROKEN = GOOD.replace("tl.load(", "tl.lod(", 1)  # fails when the kernel runs


def fenced(source: str) -> str:
    return f"Here is a faster kernel.\n\n```python\n{source}\n```\n"


def answer_by_mode(request: dict) -> str:
    """Repairs get a fixed kernel; other prompts get a working one."""
    text = json.dumps(request["messages"]).lower()
    return fenced(GOOD.replace("1024", "512")) if "repair" in text else fenced(GOOD)


def run_evolve(tmp_path, server, *flags):
    config = tmp_path / "kernelevo.toml"
    config.write_text("[llm]\nbackoff_base_s = 0.01\nbackoff_max_s = 0.05\n"
                      "retry_after_max_s = 0.05\nmax_attempts = 4\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("OPENAI_API_KEY", None)
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "kernelevo.cli", "evolve", str(TASK), "--model", "fake-model",
         "--base-url", server.base_url, "--runs-dir", str(runs), "--config", str(config),
         "--llm-in-flight", "2", *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    return RunStore.open(next(runs.glob("*/run.db")))


@pytest.mark.slow
def test_scripted_series_with_faults(tmp_path):
    script = [fenced(BROKEN), Status(429, retry_after="0"), "no code here, sorry",
              "", Status(500), "<<<<<<< SEARCH\nnot in the parent\n=======\nx\n>>>>>>> REPLACE",
              Delay(0.3, fenced(GOOD))]
    with FakeOpenAIServer(script, default=answer_by_mode) as server:
        store = run_evolve(tmp_path, server, "--candidates", "10", "--tokens", "400k")
        requests = list(server.requests)
    candidates = store.candidates()
    verdicts = {c.id: c.verdict for c in candidates}
    assert all(v is not None for v in verdicts.values())
    origins = [c.candidate.origin for c in candidates]
    assert origins.count("seed") == 1 and "llm" in origins
    statuses = {c.candidate.origin: [] for c in candidates}
    for c in candidates:
        statuses[c.candidate.origin].append(c.verdict.status)
    assert "ok" in statuses["llm"], statuses
    # The broken kernel failed with a reason and was sent back for repair.
    assert any(c.verdict.status == "runtime_error" for c in candidates), statuses
    assert "repair" in statuses, statuses
    # Answers that could not be used were recorded with their reason, not raised.
    unparsed = store.events("unparsed_answer")
    assert len(unparsed) >= 2
    assert all(e.payload["reason"] for e in unparsed)
    # Budgets: no more than 10 proposed candidates, tokens within the limit.
    assert len([c for c in candidates if c.candidate.origin != "seed"]) <= 10
    totals = store.totals()
    assert 0 < totals.tokens_in + totals.tokens_out <= 400_000
    assert totals.llm_calls >= 5
    calls = store.llm_calls()
    assert all(call.state in ("finished", "failed") for call in calls)
    finished = [call for call in calls if call.state == "finished"]
    assert all(call.input_tokens > 0 for call in finished)
    assert len(requests) >= len(finished)


@pytest.mark.slow
def test_token_budget_is_never_overrun(tmp_path):
    with FakeOpenAIServer([], default=lambda request: fenced(GOOD)) as server:
        store = run_evolve(tmp_path, server, "--tokens", "30k", "--candidates", "50")
    totals = store.totals()
    assert totals.tokens_in + totals.tokens_out <= 30_000
    assert any(e.payload.get("reason", "").startswith("token") or "budget" in json.dumps(
        e.payload) for e in store.events("stop") + store.events("budget"))
