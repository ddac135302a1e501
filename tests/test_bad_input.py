"""Bad input gives a clear error (exit 2, the value and the fix), never a traceback or a wrong run.

Each case is one a user can type; a full disk is SQLite's own "database or
disk is full", brought on by capping the database's size (PRAGMA
max_page_count), so the store's real error path runs.
"""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import torch

from kernelevo.store import schema as store_schema
from kernelevo.candidate import load_candidate
from kernelevo.cli.app import app
from kernelevo.config import EvalConfig
from kernelevo.config_file import TABLES, resolve
from kernelevo.errors import ConfigError, StoreError
from kernelevo.store.lock import status_now
from kernelevo.evaluate.remote.address import check_address, resolve_host
from kernelevo.schema import _split
from kernelevo.search.config import SearchConfig
from kernelevo.store.run_store import RunStore
from kernelevo.suite.tasks import parse_ranges
from kernelevo.task import load_task
from tests.conftest import ROOT
from tests.fakes import FakeOpenAIServer

TASK = str(ROOT / "tests/fixtures/tasks/add.py")
HONEST = str(ROOT / "tests/fixtures/candidates/honest_add.py")


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def said(done) -> str:
    return " ".join(done.output.split())


def refused(done, *words: str) -> None:
    """Exit 2 with every word in the message, and no traceback."""
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    for word in words:
        assert word in said(done), done.output


def toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "k.toml"
    path.write_text(text)
    return str(path)


# -- files and folders -------------------------------------------------------------------


def test_a_runs_folder_that_is_a_file_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with FakeOpenAIServer(default="never") as server:
        done = cli("evolve", TASK, "--model", "gpt-4o", "--base-url", server.base_url,
                   "--device", "cpu", "--runs-dir", str(afile))
    refused(done, f"the runs folder {afile} is not a folder", "give --runs-dir")


def test_a_binary_config_file_is_refused(tmp_path):
    path = tmp_path / "k.toml"
    path.write_bytes(bytes(range(256)))
    refused(cli("config", "--config", str(path)), f"config file {path} is not UTF-8 text",
            "give a TOML file")


def test_a_suite_range_of_billions_is_refused_before_it_is_built():
    with pytest.raises(Exception, match=r"spans 99,999,999,999 problems.*write e.g. 1-100"):
        parse_ranges("1-99999999999", "kernelbench:level1/1-99999999999")
    assert parse_ranges("3,1-2,2") == [3, 1, 2]


def test_suite_out_that_is_a_file_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    done = cli("suite", TASK, "--solutions", str(tmp_path), "--out", str(afile))
    refused(done, f"--out {afile}", "is a file, not a folder")


def test_report_over_an_existing_file_needs_force(tmp_path):
    with RunStore.create(tmp_path / "runs", "add", Path(TASK).read_text(), {}) as store:
        run_id = store.run_id
    report = tmp_path / "report.html"
    report.write_text("precious")
    runs = ("--runs-dir", str(tmp_path / "runs"))
    refused(cli("report", run_id, "-o", str(report), *runs), "exists: pass --force")
    assert report.read_text() == "precious"
    assert cli("report", run_id, "-o", str(report), "--force", *runs).exit_code == 0
    assert "<html" in report.read_text()


def test_an_empty_run_name_picks_no_run(tmp_path):
    RunStore.create(tmp_path, "add", "x", {}).close()  # the only run: '' would match it
    refused(cli("show", "", "--runs-dir", str(tmp_path)), "the run given is empty")


# -- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("[eval.timing]\nmin_samples = 50\nmax_samples = 10\n",
     "min_samples (50) is above max_samples (10): give min_samples <= max_samples"),
    ('[llm.prices]\n"my-model" = [-1, 2]\n', "price of 'my-model' is [-1, 2]: both prices"),
    ('[llm.prices]\n"my-model" = [1]\n', "price of 'my-model' is [1]: give [input, output]"),
    ('[llm]\nbase_url = "file:///etc/passwd"\n', "'file:///etc/passwd' is not an http(s) URL"),
    ('[llm]\nmodels = {"" = 1}\n', "model name '' is blank"),
    ("[llm]\ntimeout_s = 900\n", "give_up_s (600 s) is below timeout_s (900 s)"),
    ('[search]\ncluster = "notanaddress"\n', "'notanaddress' is not a scheduler's address"),
    ("[eval]\ninput_sets = 1000000000\n",
     "[eval] input_sets: expected a whole number from 2 to 64, got 1000000000"),
    ("[eval.timing]\nmax_samples = 1000000000000\n",
     "max_samples: expected a whole number from 1 to 100000"),
    ("[search]\nislands = 100000000\n", "islands: expected a whole number from 1 to 100"),
    ('[llm]\napi_key_env = ""\n', "[llm] api_key_env: '' is no environment variable's name"),
])
def test_config_refuses_what_a_run_would(tmp_path, text, message):
    refused(cli("config", "--config", toml(tmp_path, text)), message)


def evolve_refused(tmp_path: Path, *args: str, words: tuple[str, ...]) -> None:
    """`evolve` with these flags exits 2 with every word and stores no run."""
    runs = tmp_path / "runs"
    done = cli("evolve", TASK, "--device", "cpu", "--runs-dir", str(runs), *args)
    refused(done, *words)
    assert not runs.exists() or not list(runs.iterdir())


@pytest.mark.parametrize("args, words", [
    (("--islands", "100000000"), ("--islands ([search] islands)", "from 1 to 100")),
    (("--model", "a="), ("--model 'a=' gives no weight after '='", "--model a=2")),
    (("--model", "a=x"), ("the weight 'x' is no number",)),
    (("--model", "m", "--api-key-env", ""), ("--api-key-env ([llm] api_key_env)",
                                             "give the variable that holds the key")),
    (("--model", "m", "--api-key-env", "KERNELEVO_NO_SUCH_VARIABLE"),
     ("the key's environment variable KERNELEVO_NO_SUCH_VARIABLE", "is not set",
      "export KERNELEVO_NO_SUCH_VARIABLE=YOUR_KEY")),
    (("--model", "m", "--gpus", ""), ("--gpus '' names no GPU", "leave out --gpus")),
    (("--model", "m", "--base-url", "http://[::1"),
     ("--base-url ([llm] base_url)", "is no valid URL (Invalid IPv6 URL)")),
    (("--model", "m", "--base-url", "http://127.0.0.1:99999/v1"),
     ("'http://127.0.0.1:99999/v1' is no valid URL (Port out of range",)),
], ids=["islands", "empty-weight", "bad-weight", "empty-key-variable",
        "unset-key-variable", "empty-gpus", "broken-url", "port-out-of-range"])
def test_evolve_refuses_flags_that_cannot_work_before_storing_a_run(tmp_path, monkeypatch,
                                                                   args, words):
    monkeypatch.delenv("KERNELEVO_NO_SUCH_VARIABLE", raising=False)
    base = () if "--base-url" in args else ("--base-url", "http://127.0.0.1:9/v1")
    evolve_refused(tmp_path, *args, *base, words=words)


def test_eval_refuses_a_hundred_million_input_sets_at_once():
    started = time.monotonic()
    refused(cli("eval", TASK, HONEST, "--local", "--sets", "100000000"),
            "--sets ([eval] input_sets): expected a whole number from 2 to 64, got 100000000")
    assert time.monotonic() - started < 10  # refused, not judged until memory runs out


def test_evolve_checks_what_spans_keys_as_config_does(tmp_path):
    """give_up_s below timeout_s: refused by both, also when no model makes a client."""
    settings = toml(tmp_path, "[llm]\ngive_up_s = 10\n")
    words = ("give_up_s (10 s) is below timeout_s (300 s)",)
    refused(cli("config", "--config", settings), *words)
    evolve_refused(tmp_path, "--config", settings, "--seed", HONEST, words=words)


def test_a_named_key_variable_that_is_set_is_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELEVO_TEST_KEY", "sk-test")
    with FakeOpenAIServer(default="no code here") as server:
        done = cli("evolve", TASK, "--model", "gpt-4o", "--base-url", server.base_url,
                   "--api-key-env", "KERNELEVO_TEST_KEY", "--candidates", "1", "--device",
                   "cpu", "--no-compile", "--runs-dir", str(tmp_path / "runs"))
    assert done.exit_code in (0, 1) and "KERNELEVO_TEST_KEY" not in done.output, done.output


def test_a_serve_job_asking_for_a_trillion_samples_is_refused():
    from kernelevo.evaluate.protocol import JudgeJob

    job = JudgeJob.of(load_task(TASK), [load_candidate(HONEST)], EvalConfig()).to_dict()
    job["eval"]["timing"]["max_samples"] = 10 ** 12
    with pytest.raises(ConfigError, match=r"eval\.timing\.max_samples: expected a whole "
                                          r"number from 1 to 100000"):
        JudgeJob.from_dict(job)


# -- commands that search later: suite --evolve, model optimize ---------------------------


def test_suite_refuses_search_flags_without_evolve(tmp_path):
    done = cli("suite", TASK, "--model", "m", "--solutions", str(tmp_path), "--out",
               str(tmp_path / "out"))
    refused(done, "--model only applies with --evolve", "add --evolve, or leave it out")
    done = cli("suite", TASK, "--tokens", "1M", "--time", "1h", "--solutions", str(tmp_path),
               "--out", str(tmp_path / "out"))
    refused(done, "--tokens, --time only apply with --evolve", "leave them out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag, value, words", [
    ("--tokens", "nan", "--tokens ([budget] tokens): cannot read 'nan' as a token count"),
    ("--usd", "nan", "--usd ([budget] usd): cannot read 'nan' as dollars"),
    ("--time", "soon", "--time ([budget] time): cannot read 'soon' as a duration"),
    ("--model", "a=", "--model 'a=' gives no weight"),
])
def test_suite_evolve_refuses_a_bad_budget_before_any_task(tmp_path, flag, value, words):
    done = cli("suite", TASK, "--evolve", flag, value, "--out", str(tmp_path / "out"))
    refused(done, words)
    assert not (tmp_path / "out").exists()


def test_model_optimize_refuses_a_bad_budget_before_profiling(tmp_path):
    done = cli("model", "optimize", TASK, "-o", str(tmp_path / "out"), "--tokens", "nan",
               "--device", "cpu")
    refused(done, "--tokens ([budget] tokens): cannot read 'nan' as a token count")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["profile", "extract", "optimize"])
def test_model_commands_refuse_a_device_they_cannot_use(tmp_path, command):
    out = () if command == "profile" else ("-o", str(tmp_path / "out"))
    done = cli("model", command, TASK, *out, "--device", "tpu")
    refused(done, "Invalid value for '--device'", "'cpu', 'cuda'")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_model_profile_on_cuda_without_a_gpu_says_so():
    refused(cli("model", "profile", TASK, "--device", "cuda"),
            "--device cuda: no CUDA GPU is visible here", "give --device cpu")


@pytest.mark.parametrize("command", ["extract", "optimize"])
def test_model_output_that_is_a_file_is_refused_before_profiling(tmp_path, command):
    afile = tmp_path / "afile"
    afile.write_text("x")
    refused(cli("model", command, TASK, "-o", str(afile), "--device", "cpu"),
            f"-o {afile} is a file, not a folder", "give -o a folder")
    assert afile.read_text() == "x"


def test_a_file_base_url_flag_is_refused():
    refused(cli("config", "--base-url", "file:///etc/passwd"), "--base-url ([llm] base_url)",
            "not an http(s) URL")


def test_an_empty_model_name_is_refused_before_a_run(tmp_path):
    done = cli("evolve", TASK, "--model", "", "--base-url", "http://127.0.0.1:9/v1",
               "--runs-dir", str(tmp_path / "runs"))
    refused(done, "--model '' names no model")
    assert not (tmp_path / "runs").exists()


def test_a_dollar_budget_with_an_unpriced_model_is_refused_before_the_run_is_stored(tmp_path):
    done = cli("evolve", TASK, "--usd", "1", "--model", "my-local-model", "--base-url",
               "http://127.0.0.1:9/v1", "--device", "cpu", "--runs-dir", str(tmp_path / "runs"))
    refused(done, "price of 'my-local-model' is unknown", "[llm.prices]", "drop --usd")
    assert not (tmp_path / "runs").exists()


def test_a_cluster_address_that_is_none_fails_at_once():
    with pytest.raises(ConfigError, match="write tcp://HOST:8786"):
        SearchConfig(cluster="notanaddress")
    for good in ("tcp://10.0.0.1:8786", "127.0.0.1:8786", "inproc://10.0.0.1/1/1"):
        assert check_address(good) == good
    with pytest.raises(ConfigError, match="cannot resolve the host 'no-such-host.invalid'"):
        resolve_host("tcp://no-such-host.invalid:8786")


FLOAT_KEYS = [(table, key) for table, spec in TABLES.items() for key, hint in spec.hints.items()
              if _split(hint)[0] is float]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("table, key", FLOAT_KEYS, ids=[f"{t}.{k}" for t, k in FLOAT_KEYS])
def test_every_float_setting_must_be_finite(tmp_path, table, key, value):
    path = toml(tmp_path, f"[{table}]\n{key} = {value!r}\n")  # TOML reads nan, inf, -inf
    with pytest.raises(ConfigError, match=rf"\[{table}\] {key}: .*give a finite number"):
        resolve(path)


@pytest.mark.parametrize("args, key", [
    (("--atol", "nan", "--rtol", "nan"), "--atol ([eval] atol)"),
    (("--rtol", "inf"), "--rtol ([eval] rtol)"),
    (("--timeout", "nan"), "--timeout ([eval] timeout_s)"),
])
def test_non_finite_flags_are_refused_naming_the_key(args, key):
    refused(cli("eval", TASK, HONEST, "--local", *args), key, "give a finite number")
    refused(cli("config", *args), key, "give a finite number")


def test_nan_timeout_in_the_file_is_refused(tmp_path):
    refused(cli("config", "--config", toml(tmp_path, "[eval]\ntimeout_s = nan\n")),
            "[eval] timeout_s: expected a number > 0, got nan: give a finite number")


def test_the_float_keys_cover_every_table_with_floats():
    assert {table for table, _ in FLOAT_KEYS} >= {"eval", "eval.timing", "search", "llm"}
    assert ("eval", "atol") in FLOAT_KEYS and ("llm", "give_up_s") in FLOAT_KEYS


# -- a full disk -------------------------------------------------------------------------


def cap_databases(monkeypatch: pytest.MonkeyPatch, grow_pages: int) -> None:
    """Every run.db opened from now on may grow by `grow_pages` pages, then the disk is full."""
    connect = store_schema.connect

    def capped(path):
        connection = connect(path)
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {max(pages + grow_pages, 1)}")
        return connection

    monkeypatch.setattr(store_schema, "connect", capped)


def test_a_full_disk_at_the_start_leaves_no_stub_run(tmp_path, monkeypatch):
    cap_databases(monkeypatch, 0)
    with pytest.raises(StoreError, match=r"the disk is full \(database or disk is full\): "
                                         r"free space.*nothing of the run was kept"):
        RunStore.create(tmp_path, "add", "x", {})
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_mid_run_stops_it_with_one_message_and_the_store_intact(tmp_path,
                                                                          monkeypatch):
    cap_databases(monkeypatch, 60)
    runs = tmp_path / "runs"
    with FakeOpenAIServer(default="no code here") as server:
        done = cli("evolve", TASK, "--model", "gpt-4o", "--base-url", server.base_url,
                   "--device", "cpu", "--no-compile", "--runs-dir", str(runs))
    (run_dir,) = runs.iterdir()
    refused(done, f"run {run_dir.name} stopped", "the disk is full", "free space",
            f"continue it with --resume {run_dir.name}")
    assert said(done).count("the disk is full") == 1
    monkeypatch.undo()
    with RunStore.open(run_dir) as store:  # still readable, every write whole
        assert store.candidates() and store.totals().llm_calls >= 1
        # Whether or not its stop could be recorded, it shows interrupted: resumable.
        assert status_now(store.run_info().status, run_dir) == "interrupted"


def test_only_a_full_or_failing_disk_becomes_a_store_error(tmp_path):
    assert store_schema.write_error(tmp_path, sqlite3.OperationalError("no such table")) is None
    failing = store_schema.write_error(tmp_path, sqlite3.OperationalError("disk I/O error"))
    assert isinstance(failing, StoreError) and "check the disk" in str(failing)
