"""Run bookkeeping: a failed start leaves no run `running`, one driver per run, resume flags."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from kernelevo import evolve_setup as setup
from kernelevo.cli import app
from kernelevo.cli_evolve import run_evolve
from kernelevo.config import EvalConfig
from kernelevo.config_file import budget_limits, resolve
from kernelevo.errors import ConfigError
from kernelevo.run_lock import RunBusyError, acquire_run_lock
from kernelevo.run_resume import CHANGE_EVENT, apply_overrides, resume_overrides
from kernelevo.search.loop import Evolution, SearchConfig
from kernelevo.store import RunStore
from kernelevo.store_listing import list_runs
from kernelevo.task import load_task
from tests.conftest import ROOT

TASK = ROOT / "tests/fixtures/tasks/add.py"
SEED = ROOT / "tests/fixtures/candidates/honest_add.py"


def kernelevo(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "kernelevo.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def stored_run(runs: Path, run_id: str = "run-r") -> Path:
    """A tuner-only run with no candidates, stopped: resuming it ends at once."""
    config = setup.run_config(EvalConfig(device="cpu"), SearchConfig(), {},
                              budget_limits(resolve(None)))
    with RunStore.create(runs, "add", TASK.read_text(), config, run_id=run_id) as store:
        store.set_status("interrupted")
    return runs / run_id


# -- a failed start ---------------------------------------------------------------


def test_a_start_that_needs_a_missing_gpu_leaves_no_run(tmp_path):
    runs = tmp_path / "runs"
    done = kernelevo("evolve", str(TASK), "--seed", str(SEED), "--device", "cuda",
                     "--runs-dir", str(runs))
    assert done.returncode == 2 and "no CUDA GPU is visible" in done.stderr
    assert [r.status for r in list_runs(runs)] == []


def test_a_run_that_fails_after_it_is_stored_is_marked_interrupted_with_why(tmp_path,
                                                                           monkeypatch):
    def broken_seed(self, candidates):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Evolution, "seed", broken_seed)
    options = setup.evolve_options(resolve(None, {"eval": {"device": "cpu"}}), seeds=[SEED],
                                   runs_dir=tmp_path / "runs")
    with pytest.raises(RuntimeError, match="disk on fire"):
        run_evolve(Console(quiet=True), load_task(str(TASK)), options)
    (summary,) = list_runs(tmp_path / "runs")
    assert summary.status == "interrupted"
    with RunStore.open(summary.path) as store:
        (failed,) = store.events("failed")
    assert "disk on fire" in failed.payload["error"]


# -- --gpus -------------------------------------------------------------------------


def test_gpu_lists_name_visible_gpus():
    assert setup.select_gpus("all", 2) == [0, 1] and setup.select_gpus("all", 0) == []
    assert setup.select_gpus("1", 2) == [1] and setup.select_gpus("0,1", 2) == [0, 1]
    for bad, match in (("2", "no visible GPU has index 2"), ("0,-1", "index -1"),
                       ("x", "write 'all'"), ("", "write 'all'"), ("0,0", "named twice")):
        with pytest.raises(ConfigError, match=match):
            setup.select_gpus(bad, 2)
    with pytest.raises(ConfigError, match="no GPU is visible"):
        setup.select_gpus("0", 0)


@pytest.mark.parametrize("visible, gpus, message", [
    (2, "2", "no visible GPU has index 2 (this machine shows 2 GPU(s), 0 to 1"),
    (2, "0,one", "write 'all' or GPU indexes"),
    (0, "0", "no GPU is visible here"),
])
def test_gpus_that_name_no_visible_gpu_exit_2_before_a_run_exists(tmp_path, monkeypatch,
                                                                  visible, gpus, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: visible > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    runs = tmp_path / "runs"
    done = CliRunner().invoke(app, ["evolve", str(TASK), "--seed", str(SEED), "--gpus", gpus,
                                    "--runs-dir", str(runs)], env={"COLUMNS": "300"})
    assert done.exit_code == 2, done.output
    assert message in " ".join(done.output.split())
    assert list_runs(runs) == []


# -- one driver per run ---------------------------------------------------------------


def test_the_run_lock_is_exclusive_until_released(tmp_path):
    run_dir = stored_run(tmp_path / "runs")
    with acquire_run_lock(run_dir, "run-r"):
        with pytest.raises(RunBusyError, match=f"pid {os.getpid()}"):
            acquire_run_lock(run_dir, "run-r")
    with acquire_run_lock(run_dir, "run-r") as again:
        assert again.held


def test_resuming_a_run_another_process_drives_exits_2_and_changes_nothing(tmp_path):
    runs = tmp_path / "runs"
    run_dir = stored_run(runs)
    with acquire_run_lock(run_dir, "run-r"):
        done = kernelevo("evolve", "--resume", "run-r", "--runs-dir", str(runs))
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert "run run-r is being driven by another process" in message
    assert f"pid {os.getpid()}" in message and "--resume run-r" in message
    with RunStore.open(run_dir) as store:
        assert store.events() == [] and store.run_info().status == "interrupted"


# -- resume flags -----------------------------------------------------------------------


def test_overrides_hold_only_the_flags_given_and_report_changes():
    assert resume_overrides() == {}
    overrides = resume_overrides(tokens="2M", usd="1.5", time_limit="1h", candidates=4,
                                 base_url="http://h/v1", models={"m": 1.0})
    assert overrides == {"budget": {"tokens": 2_000_000, "usd": 1.5, "wall_s": 3600.0,
                                    "candidates": 4},
                         "llm": {"base_url": "http://h/v1", "models": {"m": 1.0}}}
    config = {"budget": {"tokens": 1_000_000, "usd": 1.5}, "llm": {}}
    updated, changes = apply_overrides(config, {"budget": {"tokens": 5, "usd": 1.5}})
    assert updated["budget"] == {"tokens": 5, "usd": 1.5}
    assert changes == {"budget.tokens": {"from": 1_000_000, "to": 5}}
    assert config["budget"]["tokens"] == 1_000_000  # the stored config is not mutated


def test_resume_applies_budget_and_model_flags_and_records_the_change(tmp_path):
    runs = tmp_path / "runs"
    run_dir = stored_run(runs)
    done = kernelevo("evolve", "--resume", "run-r", "--runs-dir", str(runs), "--tokens", "2M",
                     "--usd", "3", "--time", "1h", "--candidates", "0", "--model", "m2",
                     "--base-url", "http://127.0.0.1:9/v1")
    assert done.returncode == 0, done.stderr
    assert "settings changed on resume" in done.stderr and "budget.tokens" in done.stderr
    with RunStore.open(run_dir) as store:
        info, (event,) = store.run_info(), store.events(CHANGE_EVENT)
    assert info.config["budget"] == {"tokens": 2_000_000, "usd": 3.0, "wall_s": 3600.0,
                                     "candidates": 0}
    assert info.config["llm"]["models"] == {"m2": 1.0}
    assert info.config["llm"]["base_url"] == "http://127.0.0.1:9/v1"
    assert event.payload["changes"]["budget.tokens"] == {"from": 1_000_000, "to": 2_000_000}
    assert event.payload["changes"]["llm.models"] == {"from": None, "to": {"m2": 1.0}}
