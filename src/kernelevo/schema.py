"""Constraints declared on the fields of settings dataclasses, and values checked against them.

A field written `timeout_s: Annotated[float, POSITIVE] = 300.0` carries its own
type and range, so `__post_init__`, the config file's schema and the flags all
read one declaration and cannot drift apart. `settings_from_dict` and `settings_to_dict` are the one
codec of a settings dataclass to and from plain JSON-like values: the config
file, a serve job, the child's pipe and a stored run all go through them.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, Union

from kernelevo.errors import ConfigError, SettingError

Settings = TypeVar("Settings")

__all__ = ["AT_LEAST_ONE", "Annotated", "Bound", "Check", "NON_NEGATIVE", "OneOf", "POSITIVE",
           "check_fields", "check_value", "choices", "describe", "did_you_mean", "field_hints",
           "settings_from_dict", "settings_to_dict"]


@dataclass(frozen=True)
class Bound:
    """A numeric range: `low` (excluded when `strict`) up to `high` (included)."""

    low: float | None = None
    high: float | None = None
    strict: bool = False

    def holds(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.strict else value < self.low):
            return False
        return self.high is None or value <= self.high

    def text(self) -> str:
        if self.low is not None and self.high is not None:
            return f"from {self.low:g} to {self.high:g}"
        if self.low is not None:
            return f"{'>' if self.strict else '>='} {self.low:g}"
        return f"<= {self.high:g}" if self.high is not None else ""


@dataclass(frozen=True)
class OneOf:
    """A string that must be one of `choices`."""

    choices: tuple[str, ...]


@dataclass(frozen=True)
class Check:
    """A rule beyond type and range (a URL that parses): `test` raises ConfigError with the fix."""

    test: Callable[[Any], Any]


POSITIVE = Bound(0, strict=True)
NON_NEGATIVE = Bound(0)
AT_LEAST_ONE = Bound(1)

_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def field_hints(cls: type) -> dict[str, Any]:
    """Each field's type hint of a dataclass, its Annotated constraints kept."""
    # A typed front for the cache: lru_cache's wrapper takes a Hashable, which mypy
    # finds no type[...] value to be (it reads the instances' unbound __hash__).
    return _field_hints(cls)


@functools.lru_cache(maxsize=None)
def _field_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _split(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """(the bare type, its constraints) of a hint; `X | None` is X, None being always allowed."""
    constraints: tuple[Any, ...] = ()
    if typing.get_origin(hint) is Annotated:
        hint, *extra = typing.get_args(hint)
        constraints = tuple(extra)
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            inner, more = _split(args[0])
            return inner, constraints + more
    return hint, constraints


def describe(hint: Any) -> str:
    """What a value of `hint` must be, in words: "a number > 0", "one of gpu, call"."""
    bare, constraints = _split(hint)
    for constraint in constraints:
        if isinstance(constraint, OneOf):
            return "one of " + ", ".join(constraint.choices)
    origin = typing.get_origin(bare)
    if origin in (tuple, list):
        item = describe(typing.get_args(bare)[0])
        return f"a list of {item[len('one of '):] if item.startswith('one of ') else _plural(item)}"
    if origin is dict:
        return f"a table of {_plural(describe(typing.get_args(bare)[1]))}"
    text = _NAMES.get(bare, "any value")
    bounds = " ".join(c.text() for c in constraints if isinstance(c, Bound))
    return f"{text} {bounds}".strip()


def _plural(text: str) -> str:
    text = text.removeprefix("a ").removeprefix("any ")
    return text.replace("number", "numbers").replace("string", "strings").replace("value", "values")


def check_value(hint: Any, value: Any) -> Any:
    """`value` as `hint` wants it (an int where a float is wanted is a float, a list a tuple).

    Raises ConfigError "expected ..., got ..." when the type or a range or choice does not
    hold, and a Check's own ConfigError when its rule does not.
    """
    bare, constraints = _split(hint)
    if value is None and hint is not bare and _allows_none(hint):
        return None
    converted = _convert(bare, value)
    if converted is _WRONG:
        raise ConfigError(f"expected {describe(hint)}, got {value!r}")
    if isinstance(converted, float) and not math.isfinite(converted):
        # NaN passes every comparison's test by failing it; infinity is no setting either.
        raise ConfigError(f"expected {describe(hint)}, got {value!r}: give a finite number")
    for constraint in constraints:
        if isinstance(constraint, Bound) and not constraint.holds(converted):
            raise ConfigError(f"expected {describe(hint)}, got {value!r}")
        if isinstance(constraint, OneOf) and converted not in constraint.choices:
            raise ConfigError(f"expected {describe(hint)}, got {value!r}")
        if isinstance(constraint, Check):
            constraint.test(converted)
    return converted


_WRONG = object()


def _allows_none(hint: Any) -> bool:
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    return type(None) in typing.get_args(hint)


def _convert(bare: Any, value: Any) -> Any:
    """`value` converted to `bare`, or _WRONG; bools are never numbers."""
    if bare is Any:
        return value
    if bare is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _WRONG
    if bare in (bool, int, str):
        ok = isinstance(value, bare) and (bare is bool or not isinstance(value, bool))
        return value if ok else _WRONG
    origin, args = typing.get_origin(bare), typing.get_args(bare)
    if origin is tuple and isinstance(value, (list, tuple)):
        return tuple(check_value(args[0], item) for item in value)
    if origin is list and isinstance(value, (list, tuple)):
        return [check_value(args[0], item) for item in value]
    if origin is dict and isinstance(value, Mapping):
        return {str(key): _entry(args[1], key, item) for key, item in value.items()}
    return _WRONG


def _entry(hint: Any, key: Any, item: Any) -> Any:
    """One entry of a table, its key named in the error."""
    try:
        return check_value(hint, item)
    except ConfigError:
        raise ConfigError(f"expected {describe(hint)} for {key!r}, got {item!r}") from None


def check_fields(instance: Any, section: str = "") -> None:
    """Check every field of a frozen dataclass against its declaration, and convert it.

    The one check of a settings value: called from `__post_init__`, so every
    way of making settings (a constructor, `settings_from_dict`) runs it once.
    An int given for a float becomes a float, a list for a tuple a tuple. A
    wrong value is a SettingError naming the field (in `section`, if given).
    """
    for name, hint in field_hints(type(instance)).items():
        if dataclasses.is_dataclass(_split(hint)[0]):
            continue  # a nested settings dataclass checks itself
        value = getattr(instance, name)
        try:
            converted = check_value(hint, value)
        except ConfigError as exc:
            raise SettingError(name, str(exc), section) from None
        except OverflowError:  # an integer too large for a float
            raise SettingError(name, f"expected {describe(hint)}, got an integer too large: "
                               "give a finite number", section) from None
        if converted is not value:
            object.__setattr__(instance, name, converted)


def choices(cls: type, name: str) -> tuple[str, ...]:
    """The values field `name` of `cls` may take (its OneOf), for a flag's choices."""
    hint = field_hints(cls)[name]
    bare, constraints = _split(hint)
    if typing.get_origin(bare) in (tuple, list):
        constraints = _split(typing.get_args(bare)[0])[1]
    for constraint in constraints:
        if isinstance(constraint, OneOf):
            return constraint.choices
    raise TypeError(f"{cls.__name__}.{name} declares no choices")


def did_you_mean(name: str, known: Any) -> str:
    """A hint naming the known name closest to `name`: " (did you mean X?)", or ""."""
    close = difflib.get_close_matches(name, [str(item) for item in known], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def settings_from_dict(cls: type[Settings], data: Any, path: str = "",
                       drop_unknown: bool = False) -> Settings:
    """A settings dataclass from JSON-like values (as `settings_to_dict` gives them).

    Each value is checked once, by `check_fields` as the dataclass is made, and
    converted (a list to a tuple, an int to a float); a nested settings
    dataclass is a nested table, or given as built already (checked when it was
    made). An unknown key, an ill-typed or out-of-range
    value is a ConfigError naming it by its dotted `path`
    ("eval.timing.measure"). `drop_unknown` reads what another KernelEvo
    version wrote (a stored run): keys this one lacks are dropped.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or cls.__name__}: expected a table of settings, "
                          f"got {data!r:.80}")
    hints = field_hints(cls)
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{path}.{key}" if path else str(key)
        if key not in hints:
            if drop_unknown:
                continue
            raise ConfigError(f"{name}: unknown key{did_you_mean(str(key), hints)}; the keys "
                              f"are {', '.join(hints)}")
        bare = _split(hints[key])[0]
        is_table = isinstance(bare, type) and dataclasses.is_dataclass(bare)
        if is_table and not isinstance(value, bare):
            value = settings_from_dict(bare, value, name, drop_unknown)
        values[key] = value
    try:
        settings = cls(**values)
        if not hasattr(cls, "__post_init__"):  # settings that do not check themselves
            check_fields(settings)
        return settings
    except SettingError as exc:
        name = f"{path}.{exc.name}" if path else exc.name
        raise SettingError(name, exc.reason) from None


def settings_to_dict(settings: Any) -> dict[str, Any]:
    """A settings dataclass as plain JSON values (tuples as lists), for `settings_from_dict`."""
    return {item.name: _plain(getattr(settings, item.name))
            for item in dataclasses.fields(settings)}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return settings_to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    return value
