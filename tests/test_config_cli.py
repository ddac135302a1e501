"""Settings on the command line: a bad file or flag exits 2 naming the key, flags left out
never override the file, `kernelevo config`, and [brackets] that survive rich."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import kernelevo
from kernelevo.cli.app import app
from kernelevo.errors import ConfigError
from kernelevo.evaluate.verdict import Verdict
from kernelevo.render import print_verdict
from tests.conftest import ROOT

ADD_TASK = str(ROOT / "tests/fixtures/tasks/add.py")


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def toml(tmp_path: Path, text: str, name: str = "k.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- a bad file or flag exits 2 naming the key ------------------------------------


BAD_FILES = [
    ("[eval]\ntimeout_s = 0\n", "[eval] timeout_s: expected a number > 0, got 0"),
    ("[eval]\ntimeout_s = \"30\"\n", "[eval] timeout_s: expected a number > 0, got '30'"),
    ("[eval]\ntimeout = 5\n", "[eval] timeout: unknown key (did you mean timeout_s?)"),
    ("[eval]\ninput_sets = 1\n", "[eval] input_sets: expected a whole number from 2 to 64, got 1"),
    ("[eval]\nprecision = \"fp8\"\n", "[eval] precision: expected one of fp32, fp16, bf16"),
    ("[eval]\nvary_shapes = 1\n", "[eval] vary_shapes: expected true or false, got 1"),
    ("[eval.timing]\nmeasure = \"wall\"\n", "[eval.timing] measure: expected one of gpu"),
    ("[eval.timing]\nbaselines = [\"inductor\"]\n", "[eval.timing] baselines: expected one "
                                                    "of eager, compile, got 'inductor'"),
    ("[eval.timing]\nwarm_ms = 5\n", "[eval.timing] warm_ms: unknown key"),
    ("[evl]\nx = 1\n", "unknown table [evl] (did you mean eval?)"),
    ("timeout_s = 5\n", "timeout_s = 5 is outside any table"),
    ("[search]\nislands = 0\n", "[search] islands: expected a whole number from 1 to 100, got 0"),
    ("[search]\nbackend = \"pytorch\"\n", "[search] backend: expected one of triton, cuda"),
    ("[search]\ndiff_probability = 1.5\n", "[search] diff_probability: expected a number "
                                          "from 0 to 1, got 1.5"),
    ("[search]\nislandz = 2\n", "[search] islandz: unknown key (did you mean islands?)"),
    ("[llm]\nmax_attempts = 0\n", "[llm] max_attempts: expected a whole number >= 1, got 0"),
    ("[llm]\nmodels = {a = 0}\n", "[llm] models: expected a number > 0 for 'a', got 0"),
    ("[llm]\nmodel = \"x\"\n", "[llm] model: unknown key (did you mean models?)"),
    ("[budget]\ntokens = -5\n", "[budget] tokens: expected a whole number >= 0, got -5"),
    ("[budget]\nusd = -1.5\n", "[budget] usd: expected a number >= 0, got -1.5"),
    ("[budget]\ntime = \"soon\"\n", "[budget] time: cannot read 'soon' as a duration"),
    ("[budget]\nwall_s = 60\n", "[budget] wall_s: unknown key"),
]


@pytest.mark.parametrize("text, message", BAD_FILES[:3] + BAD_FILES[9:13] + BAD_FILES[18:19])
def test_evolve_with_a_bad_file_exits_2_naming_the_key_and_starts_no_run(tmp_path, text,
                                                                        message):
    path = toml(tmp_path, text)
    done = cli("evolve", ADD_TASK, "--config", path, "--runs-dir", str(tmp_path / "runs"))
    assert done.exit_code == 2, done.output
    assert message in " ".join(done.output.split())
    assert not (tmp_path / "runs").exists()


HONEST = str(ROOT / "tests/fixtures/candidates/honest_add.py")
EVAL = ("eval", ADD_TASK, HONEST)
EVOLVE = ("evolve", ADD_TASK)


@pytest.mark.parametrize("command, flag, value, message", [
    (EVAL, "--timeout", "0", "--timeout ([eval] timeout_s): expected a number > 0, got 0.0"),
    (EVAL, "--sets", "1",
     "--sets ([eval] input_sets): expected a whole number from 2 to 64, got 1"),
    (EVAL, "--atol", "-1", "--atol ([eval] atol): expected a number > 0, got -1.0"),
    (EVOLVE, "--islands", "0",
     "--islands ([search] islands): expected a whole number from 1 to 100"),
    (EVOLVE, "--llm-in-flight", "0", "--llm-in-flight ([search] llm_in_flight): expected a "
                                     "whole number >= 1, got 0"),
    (EVOLVE, "--candidates", "-1", "--candidates ([budget] candidates): expected a whole "
                                   "number >= 0, got -1"),
])
def test_a_bad_flag_exits_2_naming_the_flag_and_the_key(tmp_path, command, flag, value,
                                                        message):
    done = cli(*command, flag, value, "--runs-dir", str(tmp_path)) if command == EVOLVE \
        else cli(*command, flag, value)
    assert done.exit_code == 2 and message in " ".join(done.output.split()), done.output
    done = cli("config", flag, value)
    assert done.exit_code == 2 and message in " ".join(done.output.split()), done.output


# -- flags override the file, defaults never do --------------------------------


@pytest.fixture
def captured(monkeypatch):
    """run_evolve replaced: the options it is given are kept, and the command stops there."""
    seen: list[dict] = []

    def fake_run_evolve(console, task, options):
        seen.append(options)
        raise ConfigError("stopped by the test")

    monkeypatch.setattr("kernelevo.cli.evolve.run_evolve", fake_run_evolve)
    return seen


FILE = """
[eval]
timeout_s = 60
policy = "strict"
[eval.timing]
measure = "call"
[search]
backend = "cuda"
islands = 5
llm_in_flight = 2
[llm]
api_key_env = "MY_KEY"
in_flight = 2
models = {big = 2, small = 1}
[budget]
tokens = "2M"
"""


def test_flags_left_out_never_override_the_file(tmp_path, captured):
    done = cli("evolve", ADD_TASK, "--config", toml(tmp_path, FILE),
               "--runs-dir", str(tmp_path))
    assert "stopped by the test" in done.output
    options = captured[0]
    search, llm, evaluation = options.search, options.llm, options.eval
    assert (search.backend, search.islands, search.llm_in_flight) == ("cuda", 5, 2)
    assert (llm["api_key_env"], llm["in_flight"]) == ("MY_KEY", 2)
    assert llm["models"] == {"big": 2.0, "small": 1.0}
    assert options.budget["tokens"] == 2_000_000
    assert (evaluation.timeout_s, evaluation.policy, evaluation.timing.measure) == \
        (60.0, "strict", "call")


def test_flags_given_override_the_file(tmp_path, captured):
    cli("evolve", ADD_TASK, "--config", toml(tmp_path, FILE), "--runs-dir", str(tmp_path),
        "--islands", "4", "--backend", "triton", "--api-key-env", "OTHER", "--tokens", "3M",
        "--policy", "permissive", "--timing", "gpu", "--model", "solo")
    options = captured[0]
    assert (options.search.backend, options.search.islands) == ("triton", 4)
    assert options.llm["api_key_env"] == "OTHER" and options.llm["models"] == {"solo": 1.0}
    assert options.budget["tokens"] == 3_000_000
    assert options.eval.policy == "permissive" and options.eval.timing.measure == "gpu"
    assert options.eval.timeout_s == 60.0  # not given: still the file's


def test_api_arguments_left_out_never_override_the_file(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("kernelevo.run.driver.run_evolve",
                        lambda task, options, view: seen.append(options))
    kernelevo.evolve(ADD_TASK, config_file=toml(tmp_path, FILE), runs_dir=tmp_path)
    assert seen[0].search.islands == 5 and seen[0].llm["api_key_env"] == "MY_KEY"
    kernelevo.evolve(ADD_TASK, config_file=toml(tmp_path, FILE), runs_dir=tmp_path, islands=7)
    assert seen[1].search.islands == 7


# -- kernelevo config ------------------------------------------------------------


def test_config_prints_the_effective_settings_with_their_sources(tmp_path):
    path = toml(tmp_path, FILE)
    done = cli("config", "--config", path, "--islands", "4")
    assert done.exit_code == 0, done.output
    printed = tomllib.loads(done.stdout)
    assert printed["search"]["islands"] == 4 and printed["search"]["backend"] == "cuda"
    assert printed["eval"]["timeout_s"] == 60.0 and printed["eval"]["device"] == "auto"
    assert printed["eval"]["timing"]["measure"] == "call"
    assert printed["budget"]["tokens"] == 2_000_000
    assert "atol" not in printed["eval"]  # unset: TOML has no null
    lines = done.stdout.splitlines()
    assert "islands = 4  # --islands" in lines
    assert f"timeout_s = 60.0  # config file {path}" in lines
    assert "device = \"auto\"  # default" in lines
    assert "[eval]" in lines and "[eval.timing]" in lines  # not eaten as markup


def test_config_output_read_back_gives_the_same_settings(tmp_path):
    written = cli("config", "--config", toml(tmp_path, FILE), "--usd", "2")
    assert written.exit_code == 0, written.output
    first = cli("config", "--config", toml(tmp_path, FILE), "--usd", "2", "--json")
    again = cli("config", "--config", toml(tmp_path, written.stdout, "again.toml"), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["config"] == json.loads(first.stdout)["config"]


def test_config_json_has_values_and_sources(tmp_path):
    done = cli("config", "--json", "--timeout", "30")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["config"]["eval"]["timeout_s"] == 30.0
    assert result["sources"]["eval"]["timeout_s"] == "--timeout"
    assert result["sources"]["eval"]["timing"]["measure"] == "default"
    assert result["config"]["eval"]["atol"] is None
    assert result["config"]["budget"] == {"tokens": 1_000_000, "usd": None,
                                          "candidates": None, "time": None}


# -- rich markup never eats [brackets] -------------------------------------------


def test_errors_keep_table_names_in_brackets(tmp_path):
    done = cli("config", "--config", toml(tmp_path, "[eval]\ntimeout_s = -1\n"))
    assert done.exit_code == 2
    assert "[eval] timeout_s" in done.output


def test_paths_with_brackets_survive(tmp_path):
    runs_dir = tmp_path / "[eval]"
    done = cli("runs", "--runs-dir", str(runs_dir))
    assert done.exit_code == 0, done.output
    assert "[eval]" in " ".join(done.output.split())


def test_verdict_names_notes_and_flags_keep_their_brackets():
    verdict = Verdict(status="ok", reason="passed", notes=("[eval] timing skipped",),
                      flags=("[llm.prices] unknown",))
    console = Console(record=True, width=200)
    print_verdict(console, "cand[eval].py", verdict)
    text = console.export_text()
    assert "cand[eval].py" in text
    assert "[eval] timing skipped" in text and "[llm.prices] unknown" in text
