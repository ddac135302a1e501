"""One codec for the evaluation settings: the file, the flags, a serve job, the child's pipe and
a stored run read them alike, a bad value is refused once where it enters, and the CLI's choices
are the settings' own."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from kernelevo.candidate import Candidate
from kernelevo.cli import options
from kernelevo.cli.app import app
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.config_file import RunConfig, eval_config, load_eval_config, resolve
from kernelevo.errors import ConfigError
from kernelevo.evaluate.protocol import JudgeJob
from kernelevo.evaluate.shared.messages import WorkerJob
from kernelevo.schema import (AT_LEAST_ONE, Annotated, choices, settings_from_dict,
                              settings_to_dict)
from kernelevo.search.config import SearchConfig
from kernelevo.task import task_from_source

SETTINGS_FILE = """\
[eval]
precision = "fp16"
timeout_s = 120
vary_shapes = false

[eval.timing]
measure = "gpu"
baselines = ["eager"]
min_samples = 5
call_loop_ms = 2
"""
TASK_SOURCE = ("import torch\nclass Model(torch.nn.Module):\n    pass\n"
               "def get_inputs():\n    return []\n"
               "def get_init_inputs():\n    return []\n")


def _over_the_pipe(data: dict) -> dict:
    return json.loads(json.dumps(data))


def test_the_file_the_pipe_a_job_and_a_stored_run_give_back_the_same_settings(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text(SETTINGS_FILE)
    config = load_eval_config(str(path))
    assert config == EvalConfig(precision="fp16", timeout_s=120.0, vary_shapes=False,
                                timing=TimingConfig(measure="gpu", baselines=("eager",),
                                                    min_samples=5, call_loop_ms=2.0))
    assert settings_from_dict(EvalConfig, _over_the_pipe(settings_to_dict(config))) == config
    worker = WorkerJob("x = 1", "cpu", "float32", "/w", True, config.timing)
    assert WorkerJob.from_json(_over_the_pipe(worker.to_json())).timing == config.timing
    job = JudgeJob.of(task_from_source(TASK_SOURCE, name="t"),
                      [Candidate(source="y = 1", backend="triton")], config)
    assert JudgeJob.from_dict(_over_the_pipe(job.to_dict())).config() == config
    stored = RunConfig(config, SearchConfig(), {}, {})
    assert RunConfig.from_stored(_over_the_pipe(stored.to_dict())).eval == config


def test_settings_to_dict_gives_plain_json_values():
    data = settings_to_dict(EvalConfig())
    assert data["timing"]["baselines"] == ["eager", "compile"]
    assert json.loads(json.dumps(data)) == data


def _count_checks(monkeypatch) -> list[object]:
    """The values `schema.check_value` is called with from now on, in order."""
    import kernelevo.schema as schema

    seen: list[object] = []
    check = schema.check_value

    def counted(hint, value):
        seen.append(value)
        return check(hint, value)

    monkeypatch.setattr(schema, "check_value", counted)
    return seen


def test_settings_made_from_json_check_each_value_once(monkeypatch):
    seen = _count_checks(monkeypatch)
    config = EvalConfig(timing=TimingConfig(measure="kernelbench"))
    data = _over_the_pipe(settings_to_dict(config))
    job = JudgeJob.of(task_from_source(TASK_SOURCE, name="t"),
                      [Candidate(source="y = 1", backend="triton")], config)
    worker = WorkerJob("x", "cpu", "float32", "/w", True, config.timing)
    for decoded in (lambda: settings_from_dict(EvalConfig, data),
                    lambda: JudgeJob.from_dict(_over_the_pipe(job.to_dict())).config(),
                    lambda: WorkerJob.from_json(_over_the_pipe(worker.to_json())).timing):
        seen.clear()
        decoded()
        assert seen.count("kernelbench") == 1


# -- a bad value is refused once, where it enters ----------------------------------


WANTED = "expected one of gpu, call, kernelbench, got 'wall'"


def test_a_bad_measure_in_the_file_is_refused_naming_the_file_and_key(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('[eval.timing]\nmeasure = "wall"\n')
    with pytest.raises(ConfigError) as caught:
        load_eval_config(str(path))
    assert str(caught.value) == f"config file {path}: [eval.timing] measure: {WANTED}"


def test_a_bad_measure_as_a_flag_is_refused_by_its_choices(tmp_path):
    done = CliRunner().invoke(app, ["config", "--timing", "wall"],
                              env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert done.exit_code == 2
    assert "'wall' is not one of 'gpu', 'call', 'kernelbench'" in done.output
    done = CliRunner().invoke(app, ["config", "--timeout", "0"],
                              env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert done.exit_code == 2
    assert done.output.count("expected a number > 0") == 1
    assert "--timeout ([eval] timeout_s): expected a number > 0, got 0.0" in done.output


def test_a_bad_measure_in_a_serve_job_is_refused_naming_the_field():
    job = JudgeJob.of(task_from_source(TASK_SOURCE, name="t"),
                      [Candidate(source="y = 1", backend="triton")], EvalConfig()).to_dict()
    job["eval"]["timing"]["measure"] = "wall"
    with pytest.raises(ConfigError) as caught:
        JudgeJob.from_dict(job)
    assert str(caught.value) == f"judge job field eval.timing.measure: {WANTED}"


def test_a_bad_measure_on_the_pipe_is_refused_naming_the_field():
    from kernelevo.errors import MessageError

    data = _over_the_pipe(WorkerJob("x", "cpu", "float32", "/w", True, TimingConfig()).to_json())
    data["timing"]["measure"] = "wall"
    with pytest.raises(MessageError) as caught:
        WorkerJob.from_json(data)
    assert str(caught.value) == f"a WorkerJob message's field timing: measure: {WANTED}"


def test_an_unknown_key_is_named_with_the_nearest_one_wherever_it_enters(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text("[eval.timing]\nmesure = \"gpu\"\n")
    with pytest.raises(ConfigError, match=r"\[eval.timing\] mesure: unknown key \(did you mean "
                                          r"measure\?\)"):
        load_eval_config(str(path))
    with pytest.raises(ConfigError, match=r"eval.timing.mesure: unknown key \(did you mean "
                                          r"measure\?\)"):
        settings_from_dict(EvalConfig, {"timing": {"mesure": "gpu"}}, "eval")


# -- the CLI's choices are the settings' own ----------------------------------------


def _refusal(command: list[str], flag: str) -> str:
    """What the command says of a value its flag does not offer, which lists the choices."""
    done = CliRunner().invoke(app, [*command, flag, "bogus"],
                              env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert done.exit_code == 2, done.output
    return " ".join(done.output.split())


@pytest.mark.parametrize(("flag", "settings", "key"), [
    ("--timing", TimingConfig, "measure"),
    ("--precision", EvalConfig, "precision"),
    ("--policy", EvalConfig, "policy"),
    ("--device", EvalConfig, "device"),
])
def test_the_flags_choices_are_the_settings_choices(flag, settings, key):
    offered = ", ".join(repr(choice) for choice in choices(settings, key))
    for command in (["eval", "task.py", "candidate.py"], ["config"]):
        assert f"'bogus' is not one of {offered}" in _refusal(command, flag)
    assert choices(TimingConfig, "baselines") == ("eager", "compile")


def test_a_field_without_choices_has_none_to_give():
    with pytest.raises(TypeError, match="declares no choices"):
        choices(EvalConfig, "timeout_s")
    assert tuple(member.value for member in options.Timing) == choices(TimingConfig, "measure")


@dataclass(frozen=True)
class Unchecked:
    """Settings without a __post_init__ of their own."""

    in_flight: Annotated[int, AT_LEAST_ONE] = 8


def test_settings_that_do_not_check_themselves_are_checked_by_the_codec():
    with pytest.raises(ConfigError, match=r"^llm.in_flight: expected a whole number >= 1, got 0$"):
        settings_from_dict(Unchecked, {"in_flight": 0}, "llm")
    assert settings_from_dict(Unchecked, {"in_flight": 3}).in_flight == 3


def test_the_llm_tables_own_rules_are_checks_of_its_settings():
    from kernelevo.config_file import ModelSettings
    from kernelevo.llm.openai_compat import ClientConfig

    with pytest.raises(ConfigError, match=r"^llm.models: model name ' ' is blank"):
        settings_from_dict(ModelSettings, {"models": {" ": 1}}, "llm")
    with pytest.raises(ConfigError, match=r"^prices: price of 'm' is \[1\]: give \[input"):
        ModelSettings(prices={"m": [1]})
    with pytest.raises(ConfigError, match=r"^base_url: 'http://h:99999' is no valid URL"):
        ClientConfig(base_url="http://h:99999", model="m")
    with pytest.raises(ConfigError, match=r"^api_key_env: 'A=B' is no environment variable"):
        ClientConfig(base_url="", model="m", api_key_env="A=B")


# -- resolve: each value checked once, as the settings are made, named by its source ------


def test_resolving_a_file_and_flags_checks_each_value_once(tmp_path, monkeypatch):
    seen = _count_checks(monkeypatch)
    path = tmp_path / "k.toml"
    path.write_text('[eval.timing]\nmeasure = "kernelbench"\n[llm]\n'
                    'base_url = "http://h:8000/v1"\n[budget]\ntokens = "25k"\n')
    effective = resolve(path, {"eval": {"timeout_s": 45.5}, "search": {"islands": 7}},
                        {("eval", "timeout_s"): "--timeout", ("search", "islands"): "--islands"})
    for value in ("kernelbench", "http://h:8000/v1", 25_000, 45.5, 7):
        assert seen.count(value) == 1, value
    assert (eval_config(effective).timing.measure, eval_config(effective).timeout_s) == \
        ("kernelbench", 45.5)
    assert effective.values["budget"]["tokens"] == 25_000


def test_a_value_the_settings_refuse_is_named_with_its_file_or_flag(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('[eval.timing]\nmeasure = "wall"\n')
    with pytest.raises(ConfigError) as caught:
        resolve(path)
    assert str(caught.value) == f"config file {path}: [eval.timing] measure: {WANTED}"
    with pytest.raises(ConfigError) as caught:
        resolve(None, {"eval.timing": {"measure": "wall"}},
                {("eval.timing", "measure"): "--timing"})
    assert str(caught.value) == f"--timing ([eval.timing] measure): {WANTED}"
    with pytest.raises(ConfigError) as caught:
        resolve(None, {"budget": {"time": -1}}, {("budget", "time"): "--time"})
    assert str(caught.value) == "--time ([budget] time): expected a number >= 0, got -1"


def test_a_rule_spanning_keys_fails_at_resolve_naming_what_gave_them(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text("[eval]\ntimeout_s = 30\n[eval.timing]\nmin_samples = 50\n")
    spanned = "timing min_samples (50) is above max_samples (10): give min_samples <= max_samples"
    with pytest.raises(ConfigError) as caught:
        resolve(path, {"eval.timing": {"max_samples": 10}},
                {("eval.timing", "max_samples"): "--max-samples"})
    assert str(caught.value) == \
        f"config file {path}, --max-samples ([eval.timing] max_samples): {spanned}"
    path.write_text("[llm]\ngive_up_s = 10\n")
    with pytest.raises(ConfigError, match=r"^config file .*k.toml: \[llm\] give_up_s \(10 s\) is "
                                          r"below timeout_s \(300 s\)"):
        resolve(path)
