"""End-to-end evolve runs against a fake OpenAI-compatible server on real sockets."""

import json
import os
import subprocess
import sys

import pytest

from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT
from tests.fakes.openai_server import Delay, FakeOpenAIServer, Status, closed_port_url

TASK = ROOT / "tests/fixtures/tasks/add.py"
GOOD = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
BROKEN = GOOD.replace("tl.load(", "tl.lod(", 1)  # fails when the kernel runs


def fenced(source: str) -> str:
    return f"Here is a faster kernel.\n\n```python\n{source}\n```\n"


def answer_by_mode(request: dict) -> str:
    """Repairs get a fixed kernel; other prompts get a working one."""
    text = json.dumps(request["messages"]).lower()
    return fenced(GOOD.replace("1024", "512")) if "repair" in text else fenced(GOOD)


def evolve_cli(tmp_path, base_url, *flags, returncode=0, env_base_url=False):
    """Run `kernelevo evolve` against `base_url` (given by OPENAI_BASE_URL if `env_base_url`)."""
    config = tmp_path / "kernelevo.toml"
    config.write_text("[llm]\nbackoff_base_s = 0.01\nbackoff_max_s = 0.05\n"
                      "retry_after_max_s = 0.05\nmax_attempts = 4\n"
                      "breaker_failures = 3\nbreaker_min_s = 0\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    where = ["--base-url", base_url]
    if env_base_url:
        env["OPENAI_BASE_URL"], where = base_url, []
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "kernelevo.cli.app", "evolve", str(TASK), "--model", "fake-model",
         *where, "--runs-dir", str(runs), "--config", str(config),
         "--llm-in-flight", "2", *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == returncode, done.stderr[-3000:] + done.stdout[-2000:]
    return done, RunStore.open(next(runs.glob("*/run.db")))


def run_evolve(tmp_path, server, *flags):
    return evolve_cli(tmp_path, server.base_url, *flags)[1]


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


@pytest.mark.slow
def test_an_unreachable_endpoint_exits_1_and_says_why(tmp_path):
    url = closed_port_url()
    done, store = evolve_cli(tmp_path, url, "--candidates", "5", returncode=1)
    (stop,) = store.events("stop")
    assert stop.payload["status"] == "llm_failed" and url in stop.payload["reason"]
    assert "llm_failed" in done.stderr and url in done.stderr
    assert store.events("llm_attempt")  # every failed attempt is in run.db


@pytest.mark.slow
def test_a_refused_key_exits_1_with_the_server_message(tmp_path):
    with FakeOpenAIServer(default=fenced(GOOD), api_key="sk-right") as server:
        done, store = evolve_cli(tmp_path, server.base_url, "--candidates", "5", returncode=1)
        requests = len(server.requests)
    assert "HTTP 401" in done.stderr and "OPENAI_API_KEY is not set" in done.stderr
    assert requests <= 2  # at most one per call in flight: no retries


@pytest.mark.slow
def test_a_reasoning_model_gets_max_completion_tokens(tmp_path):
    def reasoning_model(request: dict):
        if "max_tokens" in request:
            return Status(400, message="Unsupported parameter: 'max_tokens' is not supported "
                          "with this model. Use 'max_completion_tokens' instead.")
        return fenced(GOOD)

    with FakeOpenAIServer(default=reasoning_model) as server:
        store = run_evolve(tmp_path, server, "--candidates", "3")
        bodies = [r.body for r in server.requests]
    assert sum("max_tokens" in body for body in bodies) <= 2  # once per call in flight
    assert "max_completion_tokens" in bodies[-1]
    assert any(c.candidate.origin == "llm" for c in store.candidates())


@pytest.mark.slow
def test_openai_base_url_is_the_endpoint_without_base_url(tmp_path):
    with FakeOpenAIServer(default=fenced(GOOD)) as server:
        _, store = evolve_cli(tmp_path, server.base_url, "--candidates", "2",
                              env_base_url=True)
        requests = len(server.requests)
    assert requests >= 1 and store.llm_calls()[0].state == "finished"
