"""Run bookkeeping: a failed start leaves no run `running`, one driver per run, resume flags."""

import dataclasses
import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from kernelevo.run import setup
from kernelevo.candidate import load_candidate
from kernelevo.cli.app import app
from kernelevo.cli.evolve import run_evolve
from kernelevo.cli.options import FLAGS
from kernelevo.config import EvalConfig
from kernelevo.config_file import budget_limits, resolve
from kernelevo.errors import ConfigError, ResumeConflict, RunBusyError
from kernelevo.store.lock import LOCK_NAME, acquire_run_lock, is_driven, status_now
from kernelevo.run.resume import CHANGE_EVENT, apply_overrides, split_given
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.store.run_store import RunStore
from kernelevo.store.listing import list_runs
from kernelevo.task import load_task
from tests.conftest import ROOT

TASK = ROOT / "tests/fixtures/tasks/add.py"
SEED = ROOT / "tests/fixtures/candidates/honest_add.py"


def kernelevo(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    env.pop("OPENAI_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "kernelevo.cli.app", *args], cwd=ROOT, env=env,
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


def test_a_run_recorded_running_shows_interrupted_once_nobody_drives_it(tmp_path):
    run_dir = stored_run(tmp_path / "runs")
    with RunStore.open(run_dir) as store:
        store.set_status("running")
    assert is_driven(run_dir) is None  # no driver ever locked it: nothing to tell
    assert status_now("running", run_dir) == "running"
    with acquire_run_lock(run_dir, "run-r"):
        assert is_driven(run_dir) is True and status_now("running", run_dir) == "running"
        assert [r.status for r in list_runs(run_dir.parent)] == ["running"]
    assert is_driven(run_dir) is False and status_now("running", run_dir) == "interrupted"
    assert status_now("finished", run_dir) == "finished"
    assert [r.status for r in list_runs(run_dir.parent)] == ["interrupted"]
    with RunStore.open(run_dir) as store:  # shown, never written
        assert store.run_info().status == "running"


def test_a_driver_starting_during_a_readers_probe_waits_for_it(tmp_path):
    run_dir = stored_run(tmp_path / "runs")
    acquire_run_lock(run_dir, "run-r").release()
    probe = os.open(run_dir / LOCK_NAME, os.O_RDONLY)
    fcntl.flock(probe, fcntl.LOCK_SH)  # a reader caught in the middle of is_driven
    threading.Timer(0.2, os.close, (probe,)).start()
    with acquire_run_lock(run_dir, "run-r") as lock:
        assert lock.held


# -- resume flags -----------------------------------------------------------------------


def test_resume_applies_spending_settings_and_holds_the_rest_to_the_run(tmp_path):
    assert split_given(resolve(None)) == ({}, [])
    file = tmp_path / "run.toml"
    file.write_text('[budget]\ncandidates = 4\n[eval]\ntimeout_s = 9.0\n')
    overrides, fixed = split_given(resolve(file, {
        "budget": {"tokens": "2M", "usd": "1.5", "time": "1h"},
        "llm": {"base_url": "http://h/v1", "models": {"m": 1.0}, "in_flight": 2},
        "search": {"llm_in_flight": 2, "backend": "cuda"}, "eval": {"precision": "fp16"}},
        FLAGS))
    assert overrides == {"budget": {"tokens": 2_000_000, "usd": 1.5, "wall_s": 3600.0,
                                    "candidates": 4},
                         "llm": {"base_url": "http://h/v1", "models": {"m": 1.0}, "in_flight": 2},
                         "search": {"llm_in_flight": 2}}
    assert {(g.table, g.key, g.value, g.source) for g in fixed} == {
        ("search", "backend", "cuda", "--backend"), ("eval", "precision", "fp16", "--precision"),
        ("eval", "timeout_s", 9.0, f"config file {file}")}
    config = {"budget": {"tokens": 1_000_000, "usd": 1.5}, "llm": {}}
    updated, changes = apply_overrides(config, {"budget": {"tokens": 5, "usd": 1.5}})
    assert updated["budget"] == {"tokens": 5, "usd": 1.5}
    assert changes == {"budget.tokens": {"from": 1_000_000, "to": 5}}
    assert config["budget"]["tokens"] == 1_000_000  # the stored config is not mutated


def test_resume_applies_budget_model_key_and_pace_flags_and_records_the_change(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("OTHER_KEY", "sk-test")  # a key variable named must be set
    runs = tmp_path / "runs"
    run_dir = stored_run(runs)
    done = kernelevo("evolve", "--resume", "run-r", "--runs-dir", str(runs), "--tokens", "2M",
                     "--usd", "3", "--time", "1h", "--candidates", "0", "--model", "gpt-4o-mini",
                     "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "OTHER_KEY",
                     "--llm-in-flight", "3")
    assert done.returncode == 0, done.stderr
    assert "settings changed on resume" in done.stderr and "budget.tokens" in done.stderr
    with RunStore.open(run_dir) as store:
        info, (event,) = store.run_info(), store.events(CHANGE_EVENT)
    assert info.config["budget"] == {"tokens": 2_000_000, "usd": 3.0, "wall_s": 3600.0,
                                     "candidates": 0}
    assert info.config["llm"]["models"] == {"gpt-4o-mini": 1.0}  # priced: --usd can bind
    assert info.config["llm"]["base_url"] == "http://127.0.0.1:9/v1"
    assert (info.config["llm"]["api_key_env"], info.config["llm"]["in_flight"]) == (
        "OTHER_KEY", 3)
    assert info.config["search"]["llm_in_flight"] == 3
    changes = event.payload["changes"]
    assert changes["budget.tokens"] == {"from": 1_000_000, "to": 2_000_000}
    assert changes["llm.models"] == {"from": None, "to": {"gpt-4o-mini": 1.0}}
    assert changes["llm.api_key_env"] == {"from": None, "to": "OTHER_KEY"}  # {} stored
    assert changes["search.llm_in_flight"] == {"from": 8, "to": 3}


OTHER_TASK = ROOT / "tests/fixtures/tasks/softmax.py"


@pytest.mark.parametrize("args, named", [
    (["--precision", "fp16"], "--precision ([eval] precision = 'fp16'; the run's: 'fp32')"),
    (["--device", "auto"], "--device ([eval] device = 'auto'; the run's: 'cpu')"),
    (["--policy", "strict"], "--policy ([eval] policy"),
    (["--no-compile"], "--no-compile ([eval.timing] baselines = ('eager',)"),
    (["--timing", "gpu"], "--timing ([eval.timing] measure = 'gpu'; the run's: 'call')"),
    (["--backend", "cuda"], "--backend ([search] backend = 'cuda'; the run's: 'triton')"),
    (["--islands", "5"], "--islands ([search] islands = 5; the run's: 3)"),
    (["--seed", str(SEED)], f"--seed {SEED} (not one of the run's starting candidates)"),
    ([str(OTHER_TASK)], "TASK softmax (not the run's task, add)"),
    (["--config", "EVAL_FILE"], "([eval] timeout_s = 9.0; the run's: 300.0)"),
])
def test_resume_refuses_settings_that_would_change_what_the_run_means(tmp_path, args, named):
    runs = tmp_path / "runs"
    run_dir = stored_run(runs)
    eval_file = tmp_path / "eval.toml"
    eval_file.write_text("[eval]\ntimeout_s = 9.0\n[budget]\ntokens = 5\n")
    args = [str(eval_file) if arg == "EVAL_FILE" else arg for arg in args]
    done = CliRunner().invoke(app, ["evolve", *args, "--resume", "run-r", "--runs-dir",
                                    str(runs)], env={"COLUMNS": "300"})
    assert done.exit_code == 2, done.output
    message = " ".join(done.output.split())
    assert "cannot resume run run-r with settings it was not started with" in message
    assert named in message and "start a new run" in message
    with RunStore.open(run_dir) as store:  # refused before anything was written
        assert store.events() == [] and store.run_info().status == "interrupted"
        assert store.run_info().config["budget"]["tokens"] == 1_000_000


def test_the_same_task_seeds_and_settings_again_are_not_a_change(tmp_path):
    run_dir = stored_run(tmp_path / "runs")
    with RunStore.open(run_dir) as store:
        store.add_candidate(dataclasses.replace(load_candidate(SEED), origin="seed"))
        task = load_task(str(TASK))
        same = setup.evolve_options(resolve(None, {"eval": {"device": "cpu", "precision": "fp32"},
                                                   "search": {"backend": "triton"}}, FLAGS),
                                    resume="run-r", seeds=[SEED])
        setup.refuse_changes(store, task, same)
        other = dataclasses.replace(
            same, seeds=[SEED, ROOT / "tests/fixtures/candidates/python_infinite_loop.py"])
        with pytest.raises(ResumeConflict, match="python_infinite_loop.py .not one of the run"):
            setup.refuse_changes(store, task, other)


def test_resume_with_the_same_command_line_and_harmless_flags_runs(tmp_path):
    runs = tmp_path / "runs"
    stored_run(runs)
    done = kernelevo("--quiet", "evolve", str(TASK), "--resume", "run-r", "--runs-dir", str(runs),
                     "--device", "cpu", "--backend", "triton", "--candidates", "0", "--json",
                     "--gpus", "all")
    assert done.returncode == 0, done.stderr
    assert '"outcome": "budget_spent"' in done.stdout
