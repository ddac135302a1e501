"""Output for scripts: `runs` never cuts run ids off a terminal; `--json` on runs, show, evolve."""

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from kernelevo.cli.app import app
from kernelevo.run.as_json import public_config
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT
from tests.test_run_bookkeeping import stored_run
from tests.test_runs_view import runs_dir  # noqa: F401  (a fixture)

LONG_ID = "20250101-000000-a-rather-long-task-name-for-a-narrow-table-9f3e"


def cli(*args: str, columns: int = 80):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def test_runs_off_a_terminal_prints_whole_ids_however_narrow(runs_dir):  # noqa: F811
    with RunStore.create(runs_dir, "a-rather-long-task-name", "x = 1\n", {}, run_id=LONG_ID):
        pass
    done = cli("runs", "--runs-dir", str(runs_dir), columns=40)
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert lines[0].split()[:3] == ["run", "task", "status"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"run-a", "run-b", LONG_ID}
    assert rows["run-a"][1:3] == ["scale", "finished"] and rows["run-a"][-1] == "$0.0579"
    assert rows[LONG_ID][1] == "a-rather-long-task-name"


def test_runs_json_lists_every_run_with_numbers(runs_dir):  # noqa: F811
    (runs_dir / "run-c").mkdir()
    (runs_dir / "run-c" / "run.db").write_bytes(b"not a database" * 100)
    done = cli("runs", "--json", "--runs-dir", str(runs_dir))
    assert done.exit_code == 0, done.output
    runs = {run["run_id"]: run for run in json.loads(done.output)}
    assert set(runs) == {"run-a", "run-b", "run-c"}
    run_a = runs["run-a"]
    assert (run_a["status"], run_a["candidates"], run_a["evaluated"]) == ("finished", 4, 3)
    assert run_a["best"]["id"] == "c0002" and run_a["best"]["speedup_vs_eager"] == 2.5
    assert (run_a["tokens_in"], run_a["tokens_out"]) == (4000, 700)
    assert abs(run_a["cost_usd"] - 0.0579) < 1e-9 and run_a["problem"] is None
    assert runs["run-b"]["best"] is None
    assert runs["run-c"]["problem"] and "status" not in runs["run-c"]


def test_show_json_has_settings_without_secrets_ranking_and_best_verdict(runs_dir):  # noqa: F811
    done = cli("show", "run-a", "--json", "--runs-dir", str(runs_dir))
    assert done.exit_code == 0, done.output
    run = json.loads(done.output)
    assert run["run_id"] == "run-a" and run["task"] == "scale"
    assert run["baseline"]["id"] == "c0001" and [e["id"] for e in run["top"]] == ["c0002"]
    assert run["best_verdict"]["status"] == "ok" and run["passing_kernels"] == 1
    assert run["candidates_by_status"] == {"ok": 2, "compile_error": 1, "unevaluated": 1}
    assert "sk-do-not-print" not in done.output and run["config"]["search"]["islands"] == 2
    done = cli("show", "nope", "--json", "--runs-dir", str(runs_dir))
    assert done.exit_code == 2


def test_public_config_drops_credential_keys_at_any_depth():
    config = {"llm": {"api_key": "sk-1", "models": {"m": 1.0}, "nested": {"secret": "s"}},
              "budget": {"tokens": 5}}
    assert public_config(config) == {"llm": {"models": {"m": 1.0}, "nested": {}},
                                     "budget": {"tokens": 5}}


def test_evolve_json_prints_the_final_summary_on_stdout(tmp_path):
    runs = tmp_path / "runs"
    stored_run(runs)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "kernelevo.cli.app", "evolve", "--resume", "run-r",
                           "--candidates", "0", "--json", "--runs-dir", str(runs)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["run_id"] == "run-r" and summary["outcome"] == "budget_spent"
    assert summary["best_id"] is None and summary["tokens"] == 0
    assert summary["run_dir"] == str(runs / "run-r")
