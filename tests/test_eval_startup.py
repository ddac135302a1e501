"""What `eval` does before judging: check its inputs first, and say where it judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import kernelevo.evaluate.remote.client as client
from kernelevo.cli.app import app
from kernelevo.evaluate.verdict import verdict_for

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "examples" / "softmax" / "task.py"
CANDIDATE = ROOT / "examples" / "softmax" / "triton_candidate.py"

# Each bad call in one fresh process: torch is not imported there yet, and the heavy
# starts (the forkserver, asking for a service) are replaced by ones that only count.
PROBE = """
import json, sys
from typer.testing import CliRunner
import kernelevo.evaluate.remote.client as client
import kernelevo.evaluate.sandbox.jobs as jobs
from kernelevo.cli.app import app

started = []
jobs.start_forkserver = lambda *args, **kwargs: started.append("forkserver")
client.find_service = lambda *args, **kwargs: started.append("service lookup")
for args in json.loads(sys.argv[1]):
    done = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    print(json.dumps({"args": args, "exit": done.exit_code, "output": done.output,
                      "started": started, "torch": "torch" in sys.modules,
                      "httpx": "httpx" in sys.modules}))
"""


def test_bad_input_is_refused_before_anything_heavy_starts(tmp_path):
    missing = str(tmp_path / "missing.py")
    calls = [["eval", missing, str(CANDIDATE)], ["eval", str(TASK), missing],
             ["compare", missing, str(CANDIDATE), str(CANDIDATE)],
             ["compare", str(TASK), str(CANDIDATE), missing],
             ["evolve", missing, "--runs-dir", str(tmp_path / "runs")],
             ["suite", "--out", str(tmp_path / "suite"), str(tmp_path / "missing.toml")]]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(calls)], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(calls), done.stderr[-3000:]
    for result in results:
        assert result["exit"] == 2, result
        assert "missing" in result["output"] and "Traceback" not in result["output"], result
        assert result["started"] == [] and not result["torch"], result
        if result["args"][0] in ("eval", "compare"):  # the LLM client's HTTP library: 0.07 s
            assert not result["httpx"], result
    assert not (tmp_path / "runs").exists()


def test_eval_names_the_service_that_judged_in_its_text_and_its_json(monkeypatch):
    service = client.ServiceInfo("http://127.0.0.1:8799", "token", {"device": "cpu"})
    asked = []

    def answer(url, token, method, path, body=None, timeout_s=None):
        asked.append((url, path, len(body["candidates"])))
        return {"verdicts": [verdict_for("passed").to_dict()]}

    monkeypatch.setattr(client, "find_service", lambda *args, **kwargs: service)
    monkeypatch.setattr(client, "request", answer)
    text = CliRunner().invoke(app, ["eval", str(TASK), str(CANDIDATE)],
                              env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert asked == [("http://127.0.0.1:8799", "/v1/judge", 1)], text.output
    assert "judged on the service at http://127.0.0.1:8799" in text.output
    assert "--local judges in this process" in text.output
    as_json = CliRunner().invoke(app, ["eval", "--json", str(TASK), str(CANDIDATE)],
                                 env={"COLUMNS": "200"})
    verdict = json.loads(as_json.output)
    assert verdict["environment"]["judge_service"] == "http://127.0.0.1:8799"


def test_eval_with_local_never_asks_for_a_service(monkeypatch):
    import kernelevo.evaluate.sandbox.jobs as jobs

    def no_service(*args, **kwargs):
        raise AssertionError("--local asked for a service")

    class Judged:
        def __init__(self, *args, **kwargs):
            pass

        def evaluate(self, candidate):
            return verdict_for("passed")

    monkeypatch.setattr(client, "find_service", no_service)
    monkeypatch.setattr(jobs, "start_forkserver", lambda *args, **kwargs: None)
    monkeypatch.setattr("kernelevo.evaluate.parent.judge.Judge", Judged)
    done = CliRunner().invoke(app, ["eval", "--local", str(TASK), str(CANDIDATE)],
                              env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert "judged on the service" not in done.output and "passed" in done.output.lower(), \
        done.output
