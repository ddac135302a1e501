"""Constraints declared on the fields of settings dataclasses, and values checked against them.

A field written `timeout_s: Annotated[float, POSITIVE] = 300.0` carries its own
type and range, so `__post_init__`, the config file's schema and the flags all
read one declaration and cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Union

from kernelevo.errors import ConfigError

__all__ = ["AT_LEAST_ONE", "Annotated", "Bound", "NON_NEGATIVE", "OneOf", "POSITIVE",
           "check_fields", "check_value", "describe", "field_hints"]


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


POSITIVE = Bound(0, strict=True)
NON_NEGATIVE = Bound(0)
AT_LEAST_ONE = Bound(1)

_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


@functools.lru_cache(maxsize=None)
def field_hints(cls: type) -> dict[str, Any]:
    """Each field's type hint of a dataclass, its Annotated constraints kept."""
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

    Raises ConfigError "expected ..., got ..." when the type or a constraint does not hold.
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


def check_fields(instance: Any) -> None:
    """Check every field of a dataclass instance against its declared type and constraints."""
    for name, hint in field_hints(type(instance)).items():
        if dataclasses.is_dataclass(_split(hint)[0]):
            continue  # a nested settings dataclass checks itself
        try:
            check_value(hint, getattr(instance, name))
        except ConfigError as exc:
            raise ConfigError(f"{name}: {exc}") from None
