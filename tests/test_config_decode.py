"""One codec turns JSON-like settings into an EvalConfig: jobs, stored runs and the config file."""

from __future__ import annotations

import json

import pytest

from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.config_file import load_eval_config
from kernelevo.errors import ConfigError
from kernelevo.evaluate.protocol import JOB_VERSION, JudgeJob
from kernelevo.run.view import eval_config_from_run
from kernelevo.schema import settings_from_dict, settings_to_dict


def test_a_config_survives_a_trip_through_json():
    config = EvalConfig(precision="fp16", vary_shapes=False,
                        timing=TimingConfig(baselines=("eager",), measure="gpu", min_samples=5))
    again = settings_from_dict(EvalConfig, json.loads(json.dumps(settings_to_dict(config))))
    assert again == config


def test_an_unknown_setting_is_named_unless_it_came_from_another_version():
    with pytest.raises(ConfigError, match="eval.shiny: unknown key"):
        settings_from_dict(EvalConfig, {"shiny": 1}, "eval")
    with pytest.raises(ConfigError, match=r"eval.timing.warmup: unknown key \(did you mean "
                                          r"warmup_ms\?\)"):
        settings_from_dict(EvalConfig, {"timing": {"warmup": True}}, "eval")
    assert settings_from_dict(EvalConfig, {"shiny": 1, "timing": {"faster": True}},
                  drop_unknown=True) == EvalConfig()


def test_a_stored_run_an_api_job_and_the_config_file_decode_alike(tmp_path):
    settings = {"precision": "bf16", "timeout_s": 60.0, "timing": {"baselines": ["compile"]}}
    expected = EvalConfig(precision="bf16", timeout_s=60.0,
                          timing=TimingConfig(baselines=("compile",)))
    job = JudgeJob.from_dict({"version": JOB_VERSION, "task_name": "t", "task_source": "x = 1",
                              "candidates": [["y = 2", "triton"]], "eval": settings})
    assert job.config() == expected
    assert eval_config_from_run({"eval": {**settings, "from_the_future": 3}}) == expected
    config_file = tmp_path / "kernelevo.toml"
    config_file.write_text('[eval]\nprecision = "bf16"\ntimeout_s = 60.0\n'
                           '[eval.timing]\nbaselines = ["compile"]\n')
    assert load_eval_config(str(config_file)) == expected


def test_a_run_config_is_stored_and_read_back_by_one_encoding():
    from kernelevo.config_file import RunConfig
    from kernelevo.search.config import SearchConfig

    config = RunConfig(EvalConfig(precision="fp16"), SearchConfig(islands=5, backend="cuda"),
                       {"model": "m"}, {"tokens": 1000, "usd": None, "candidates": 4,
                                        "wall_s": None})
    assert RunConfig.from_stored(json.loads(json.dumps(config.to_dict()))) == config
    # A run another version wrote: settings this one lacks are dropped, the rest kept.
    stored = config.to_dict()
    stored["search"]["a_future_knob"] = 1
    stored["eval"]["timing"]["a_future_measure"] = "x"
    assert RunConfig.from_stored(stored) == config
