"""Settings a `--resume` changes: budgets, endpoint, models and cluster given again.

A resumed run otherwise keeps the settings it was started with; flags given
with `--resume` replace the stored ones, and the change is written back to
the run (so later resumes keep it) and recorded as a `settings_changed` event.
"""

from __future__ import annotations

import copy
from typing import Any

from kernelevo.budget import parse_duration_s, parse_tokens, parse_usd

# The flags a resume applies, by config section and key: {section: {key: value}}.
Overrides = dict[str, dict[str, Any]]
CHANGE_EVENT = "settings_changed"


def resume_overrides(*, tokens: str | int | None = None, usd: str | float | None = None,
                     time_limit: str | float | None = None, candidates: int | None = None,
                     base_url: str | None = None, models: dict[str, float] | None = None,
                     cluster: str | None = None) -> Overrides:
    """The settings given explicitly, parsed, in the run config's sections and keys."""
    budget = {key: value for key, value in (
        ("tokens", parse_tokens(str(tokens)) if tokens is not None else None),
        ("usd", parse_usd(str(usd)) if usd is not None else None),
        ("wall_s", parse_duration_s(str(time_limit)) if time_limit is not None else None),
        ("candidates", candidates)) if value is not None}
    llm = {key: value for key, value in (("base_url", base_url), ("models", models or None))
           if value is not None}
    search = {"cluster": cluster} if cluster is not None else {}
    return {section: values for section, values in (("budget", budget), ("llm", llm),
                                                     ("search", search)) if values}


def apply_overrides(config: dict[str, Any],
                    overrides: Overrides) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run config with `overrides` applied, and what changed as {"section.key": {from, to}}."""
    updated = copy.deepcopy(config)
    changes: dict[str, Any] = {}
    for section, values in overrides.items():
        stored = updated.setdefault(section, {})
        for key, value in values.items():
            if stored.get(key) != value:
                changes[f"{section}.{key}"] = {"from": stored.get(key), "to": value}
                stored[key] = value
    return updated, changes


def describe_changes(changes: dict[str, Any]) -> str:
    """One line for the console: `budget.tokens 1000000 -> 2000000; ...`."""
    return "; ".join(f"{name} {change['from']} -> {change['to']}"
                     for name, change in changes.items())
