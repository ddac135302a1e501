"""The config file's schema, and the effective settings: defaults, then the file, then flags.

Every table's keys and types come from the settings dataclasses (EvalConfig,
TimingConfig, SearchConfig, ClientConfig, ModelSettings, BudgetLimits,
MemoryConfig) through `schema.field_hints`, so the file cannot accept a key
the code does not know; a nested settings dataclass (EvalConfig's `timing`)
is a nested table ([eval.timing]). Where a value enters (the file's key, a
flag) its key is looked up and an amount written as text ("10k" tokens) is
read, nothing more. `resolve` then makes each settings object once, by
`schema.settings_from_dict`: the dataclass's own check (`check_fields`, and
its rules that span keys) is the one check of every value, and the error it
raises is told naming the file or the flag that gave the value. Only values
actually given override the file: a flag left out is None here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelevo.budget import BudgetLimits, parse_duration_s, parse_tokens, parse_usd
from kernelevo.config import EvalConfig
from kernelevo.errors import ConfigError, SettingError
from kernelevo.llm.openai_compat import ClientConfig
from kernelevo.llm.pricing import PriceTable
from kernelevo.memory.settings import MemoryConfig
from kernelevo.schema import (
    AT_LEAST_ONE, POSITIVE, Annotated, Check, check_fields, did_you_mean, field_hints,
    settings_from_dict, settings_to_dict)
from kernelevo.search.config import SearchConfig

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib  # type: ignore[no-redef]

DEFAULT = "default"
FILE = "config file"  # a file's source is "config file PATH"


def _model_names(models: Mapping[str, float]) -> None:
    """ConfigError when a model's name is blank: no endpoint serves one."""
    blank = [name for name in models if not name.strip()]
    if blank:
        raise ConfigError(f"model name {blank[0]!r} is blank: give a model the endpoint "
                          "serves, e.g. gpt-4o (GET /models lists them)")


# model name -> weight
Weights = Annotated[dict[str, Annotated[float, POSITIVE]], Check(_model_names)]
# model -> [input, output] or {input, output}, USD per million tokens
Prices = Annotated[dict[str, Any], Check(PriceTable.with_overrides)]


@dataclass(frozen=True)
class ModelSettings:
    """The [llm] keys beside each model's ClientConfig: models, their prices, calls in flight."""

    models: Weights = field(default_factory=dict)
    prices: Prices = field(default_factory=dict)
    in_flight: Annotated[int, AT_LEAST_ONE] = 8

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class Table:
    """One table of the file: each key's type hint and default, and text parsers for amounts."""

    name: str
    hints: dict[str, Any]
    defaults: dict[str, Any]
    parsers: dict[str, Callable[[str], Any]] = field(default_factory=dict)
    rename: dict[str, str] = field(default_factory=dict)  # field -> key, where they differ

    def key(self, name: str) -> str:
        """The file's key of a settings field."""
        return self.rename.get(name, name)


def _table(name: str, classes: tuple[type, ...], exclude: tuple[str, ...] = (),
           rename: Mapping[str, str] | None = None,
           parsers: Mapping[str, Callable[[str], Any]] | None = None) -> Table:
    rename = dict(rename or {})
    hints: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for cls in classes:
        for spec in dataclasses.fields(cls):
            if spec.name in exclude or _nested(cls, spec.name):
                continue
            key = rename.get(spec.name, spec.name)
            hints[key] = field_hints(cls)[spec.name]
            defaults[key] = _default(spec)
    return Table(name, hints, defaults, dict(parsers or {}), rename)


def _nested(cls: type, name: str) -> type | None:
    """The settings dataclass of field `name` of `cls` (a nested table), or None."""
    hint = field_hints(cls)[name]
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def _tables(name: str, cls: type) -> list[Table]:
    """The table of a settings dataclass and, under its name, one per nested dataclass."""
    tables = [_table(name, (cls,))]
    for spec in dataclasses.fields(cls):
        inner = _nested(cls, spec.name)
        if inner is not None:
            tables += _tables(f"{name}.{spec.name}", inner)
    return tables


def _default(spec: dataclasses.Field) -> Any:
    if spec.default is not dataclasses.MISSING:
        return spec.default
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return ""  # ClientConfig.base_url: empty means OPENAI_BASE_URL


# The budget file key `time` is BudgetLimits.wall_s, as the --time flag.
BUDGET_KEYS = {"wall_s": "time"}
TABLES: dict[str, Table] = {table.name: table for table in (
    *_tables("eval", EvalConfig),
    _table("search", (SearchConfig,)),
    _table("llm", (ClientConfig, ModelSettings), exclude=("model",)),
    _table("budget", (BudgetLimits,), rename=BUDGET_KEYS,
           parsers={"tokens": parse_tokens, "usd": parse_usd, "time": parse_duration_s}),
    _table("memory", (MemoryConfig,)),
)}


def read_toml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start}): give a TOML file, e.g. one written by "
                          "`kernelevo config > kernelevo.toml`") from exc


def read_config_file(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """The file's values by table ("eval", "eval.timing", ...), each key known and an amount
    given as text read ({} without a file); `resolve` checks them as it makes the settings."""
    if not path:
        return {}
    data = flat(read_toml(path))
    where = f"{FILE} {path}"
    tables: dict[str, dict[str, Any]] = {}
    for name, values in data.items():
        if name not in TABLES and not isinstance(values, Mapping):
            raise ConfigError(f"{where}: {name} = {values!r} is outside any table: put it "
                              f"under one of {', '.join(f'[{t}]' for t in TABLES)}")
        if name not in TABLES:
            raise ConfigError(f"{where}: unknown table [{name}]{did_you_mean(name, TABLES)}; "
                              f"the tables are {', '.join(f'[{t}]' for t in TABLES)}")
        if not isinstance(values, Mapping):
            raise ConfigError(f"{where}: {name} must be a table, written [{name}], "
                              f"got {values!r}")
        tables[name] = {key: _entered(name, key, value, f"{where}: [{name}] {key}")
                        for key, value in values.items()}
    return tables


def _entered(table: str, key: str, value: Any, where: str) -> Any:
    """`value` for `key` of `table` as it enters: its key known, an amount given as text
    ("10k" tokens) read. Its type and range are checked once, as the settings are made."""
    spec = TABLES[table]
    if key not in spec.hints:
        raise ConfigError(f"{where}: unknown key{did_you_mean(key, spec.hints)}; the keys "
                          f"of [{table}] are {', '.join(spec.hints)}")
    if not (isinstance(value, str) and key in spec.parsers):
        return value
    try:
        return spec.parsers[key](value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def flat(data: Mapping[str, Any]) -> dict[str, Any]:
    """A file's tables by their dotted names: [eval]'s `timing` table as "eval.timing"."""
    tables = dict(data)
    for name in TABLES:  # a parent's name comes before its children's
        parent, _, child = name.rpartition(".")
        inside = tables.get(parent)
        if parent and isinstance(inside, Mapping) and child in inside:
            tables[parent] = {k: v for k, v in inside.items() if k != child}
            tables[name] = inside[child]
    return tables


def by_table(name: str, settings: Any) -> dict[str, Any]:
    """A settings object and those nested in it by table name: {"eval": ..., "eval.timing": ...}."""
    tables = {name: settings}
    for spec in dataclasses.fields(settings):
        if _nested(type(settings), spec.name):
            tables.update(by_table(f"{name}.{spec.name}", getattr(settings, spec.name)))
    return tables


def nested(tables: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Tables by dotted name nested as in the file and the settings ("eval.timing" in "eval")."""
    result: dict[str, Any] = {}
    for name, values in tables.items():
        *parents, last = name.split(".")
        into = result
        for parent in parents:
            into = into.setdefault(parent, {})
        into.setdefault(last, {}).update(values)
    return result


@dataclass(frozen=True)
class Settings:
    """The settings objects of one `resolve`, each made once from the effective values."""

    eval: EvalConfig
    search: SearchConfig
    client: ClientConfig  # model "": the [llm] keys that tune every model's client
    models: ModelSettings
    budget: BudgetLimits
    memory: MemoryConfig

    def tables(self) -> dict[str, tuple[Any, ...]]:
        """The objects that hold each table's keys, by table name."""
        return {**{name: (held,) for name, held in by_table("eval", self.eval).items()},
                "search": (self.search,), "llm": (self.client, self.models),
                "budget": (self.budget,), "memory": (self.memory,)}


@dataclass(frozen=True)
class Effective:
    """Every setting's value and where it came from ("default", the file, or a flag), and
    the settings objects made of them."""

    values: dict[str, dict[str, Any]]
    sources: dict[str, dict[str, str]]
    settings: Settings

    def given(self, table: str) -> dict[str, Any]:
        """The settings of `table` that the file or a flag gave (not defaults)."""
        return {key: value for key, value in self.values[table].items()
                if self.sources[table][key] != DEFAULT}


def resolve(path: str | Path | None, overrides: Mapping[str, Mapping[str, Any]] | None = None,
            given_by: Mapping[tuple[str, str], str] | None = None) -> Effective:
    """Defaults, then the file's values, then `overrides` ({table: {key: value}}; None is unset),
    made into the settings objects, which check every value once.

    `given_by` names the flag behind each override, for messages and sources.
    """
    values = {name: dict(table.defaults) for name, table in TABLES.items()}
    sources = {name: dict.fromkeys(table.defaults, DEFAULT) for name, table in TABLES.items()}
    for name, table_values in read_config_file(path).items():
        values[name].update(table_values)
        sources[name].update(dict.fromkeys(table_values, f"{FILE} {path}"))
    for name, given in (overrides or {}).items():
        for key, value in given.items():
            if value is None:
                continue
            source = (given_by or {}).get((name, key), "argument")
            values[name][key] = _entered(name, key, value, f"{source} ([{name}] {key})")
            sources[name][key] = source
    settings = Settings(
        _made(EvalConfig, "eval", values, sources), _made(SearchConfig, "search", values, sources),
        _made(ClientConfig, "llm", values, sources, model=""),
        _made(ModelSettings, "llm", values, sources),
        _made(BudgetLimits, "budget", values, sources),
        _made(MemoryConfig, "memory", values, sources))
    return Effective(_held(settings), sources, settings)


def _made(cls: type, table: str, values: Mapping[str, Mapping[str, Any]],
          sources: Mapping[str, Mapping[str, str]], **fixed: Any) -> Any:
    """A `cls` of the keys of `table` that are its fields (nested tables made first); a value
    it refuses is named with the file or the flag that gave it."""
    spec = TABLES[table]
    data: dict[str, Any] = {}
    for name in field_hints(cls):
        inner = _nested(cls, name)
        if inner is not None:
            data[name] = _made(inner, f"{table}.{name}", values, sources)
        elif spec.key(name) in spec.hints:
            data[name] = values[table][spec.key(name)]
    try:
        return settings_from_dict(cls, {**data, **fixed})
    except SettingError as exc:
        key = spec.key(exc.name)
        raise ConfigError(f"{_where(table, key, sources[table].get(key, DEFAULT))}: "
                          f"{exc.reason}") from None
    except ConfigError as exc:  # a rule that spans keys (min_samples <= max_samples)
        keys = [spec.key(name) for name in data if spec.key(name) in spec.hints]
        raise ConfigError(f"{_given_by(table, keys, sources[table], str(exc))}{exc}") from None


def _where(table: str, key: str, source: str) -> str:
    """A key and what gave it, as messages name them: "config file F: [t] k", "--f ([t] k)"."""
    if source == DEFAULT:
        return f"[{table}] {key}"
    if source.startswith(FILE):
        return f"{source}: [{table}] {key}"
    return f"{source} ([{table}] {key})"


def _given_by(table: str, keys: list[str], sources: Mapping[str, str], message: str) -> str:
    """What gave the keys a rule spanning them refused, as a prefix ("" for defaults alone):
    the file, or each flag with its key. Those keys the message names, else every one given."""
    given = [key for key in keys if sources[key] != DEFAULT]
    named = [key for key in given if re.search(rf"\b{re.escape(key)}\b", message)] or given
    blamed = dict.fromkeys(sources[key] if sources[key].startswith(FILE)
                           else _where(table, key, sources[key]) for key in named)
    return f"{', '.join(blamed)}: " if blamed else ""


def _held(settings: Settings) -> dict[str, dict[str, Any]]:
    """Each table's values as its settings objects hold them, converted by their one check
    (an int given for a float as a float, a list as a tuple)."""
    objects = settings.tables()
    values: dict[str, dict[str, Any]] = {}
    for name, table in TABLES.items():
        held = {table.key(spec.name): getattr(settings_object, spec.name)
                for settings_object in objects[name]
                for spec in dataclasses.fields(settings_object)}
        values[name] = {key: held[key] for key in table.hints}
    return values


def eval_config(effective: Effective) -> EvalConfig:
    return effective.settings.eval


def eval_tables(settings: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Evaluation settings named by key alone (`measure`, `timeout_s`) put in their tables."""
    tables: dict[str, dict[str, Any]] = {name: {} for name in TABLES
                                         if name == "eval" or name.startswith("eval.")}
    for key, value in settings.items():
        table = next((name for name in tables if key in TABLES[name].hints), None)
        if table is None:
            known = sorted(key for name in tables for key in TABLES[name].hints)
            raise ConfigError(f"unknown settings {[key]}{did_you_mean(key, known)}: known "
                              f"ones are {', '.join(known)}")
        tables[table][key] = value
    return tables


def load_eval_config(path: str | None, **overrides: Any) -> EvalConfig:
    """An EvalConfig from a TOML file's [eval] tables, then settings given as overrides."""
    return eval_config(resolve(path, eval_tables(overrides)))


def search_config(effective: Effective) -> SearchConfig:
    return effective.settings.search


@dataclass(frozen=True)
class RunConfig:
    """A run's settings as run.db keeps them: what judges, what searches, the models, the budget.

    `llm` and `budget` stay the config file's [llm] and [budget] tables as
    given (llm_settings, budget_limits); to_dict and from_stored are the one
    encoding and decoding of the stored form.
    """

    eval: EvalConfig
    search: SearchConfig
    llm: Mapping[str, Any]
    budget: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"eval": settings_to_dict(self.eval), "search": settings_to_dict(self.search),
                "llm": dict(self.llm), "budget": dict(self.budget)}

    @classmethod
    def from_stored(cls, config: Mapping[str, Any]) -> "RunConfig":
        """The settings a stored run was started with; those another version wrote and this
        one lacks are dropped, so an old or newer run can still be shown and resumed."""
        return cls(settings_from_dict(EvalConfig, config.get("eval") or {}, "eval",
                                      drop_unknown=True),
                   settings_from_dict(SearchConfig, config.get("search") or {}, "search",
                                      drop_unknown=True),
                   dict(config.get("llm") or {}), dict(config.get("budget") or {}))


def memory_config(effective: Effective) -> MemoryConfig:
    return effective.settings.memory


def llm_settings(effective: Effective) -> dict[str, Any]:
    """The run's [llm] settings as stored: those given, the key's variable, calls in flight."""
    values = effective.values["llm"]
    return {**effective.given("llm"), "api_key_env": values["api_key_env"],
            "in_flight": values["in_flight"]}


def budget_limits(effective: Effective) -> dict[str, Any]:
    """The run's budget limits: tokens, usd, wall_s (seconds) and candidates."""
    return settings_to_dict(effective.settings.budget)
