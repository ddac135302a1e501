"""The config file's schema: built from the settings' dataclasses, every table checked."""

from __future__ import annotations

import dataclasses

import pytest

from kernelevo import config_file
from kernelevo.budget import BudgetLimits
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.config_file import load_eval_config
from kernelevo.errors import ConfigError
from kernelevo.llm.openai_compat import ClientConfig
from kernelevo.search.config import SearchConfig
from tests.conftest import ROOT
from tests.test_config_cli import BAD_FILES, toml


# -- one schema, from the dataclasses ------------------------------------------


def test_every_table_has_exactly_its_dataclass_fields():
    names = {name: set(table.hints) for name, table in config_file.TABLES.items()}
    assert names["eval"] == {f.name for f in dataclasses.fields(EvalConfig)} - {"timing"}
    assert names["eval.timing"] == {f.name for f in dataclasses.fields(TimingConfig)}
    assert names["search"] == {f.name for f in dataclasses.fields(SearchConfig)}
    assert names["llm"] == ({f.name for f in dataclasses.fields(ClientConfig)} - {"model"}
                            | {"models", "prices", "in_flight"})
    assert names["budget"] == {"tokens", "usd", "time", "candidates"}
    assert len(dataclasses.fields(BudgetLimits)) == 4


@pytest.mark.parametrize("text, message", BAD_FILES)
def test_a_bad_file_names_the_table_key_and_value(tmp_path, text, message):
    path = toml(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        config_file.resolve(path)
    assert str(caught.value).startswith(f"config file {path}: ")
    assert message in str(caught.value)


def test_amounts_in_the_budget_table_read_as_the_flags_do(tmp_path):
    path = toml(tmp_path, '[budget]\ntokens = "2.5M"\nusd = "$1.50"\ntime = "1h30m"\n'
                          'candidates = 40\n')
    limits = config_file.budget_limits(config_file.resolve(path))
    assert limits == {"tokens": 2_500_000, "usd": 1.5, "wall_s": 5400.0, "candidates": 40}
    limits = config_file.budget_limits(config_file.resolve(
        toml(tmp_path, "[budget]\ntokens = 0\ntime = 90\n", "zero.toml")))
    assert limits["tokens"] == 0 and limits["wall_s"] == 90.0  # 0 is a limit, not "unset"


def test_api_settings_are_checked_like_flags():
    with pytest.raises(ConfigError, match=r"\[eval\] timeout_s\): expected a number > 0"):
        load_eval_config(None, timeout_s=0)
    with pytest.raises(ConfigError, match="islands: expected a whole number from 1 to 100"):
        SearchConfig(islands=0)


def test_the_documentation_names_every_key_of_every_table():
    text = (ROOT / "docs/config.md").read_text()
    for name, table in config_file.TABLES.items():
        assert f"`[{name}]`" in text
        missing = [key for key in table.hints if f"`{key}`" not in text]
        assert not missing, f"docs/config.md lacks [{name}] {missing}"
