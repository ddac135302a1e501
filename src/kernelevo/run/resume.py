"""Settings given with `--resume`: those a run may change are applied, the others must match.

A resumed run keeps the settings it was started with. Settings given again
(a flag, a config file, an API argument) fall in two kinds:

- what to spend and how fast: `[budget]`, `[llm]` (models, endpoint, key,
  prices, client tuning, calls in flight) and the pace of the search
  (`APPLIED_SEARCH_KEYS`). These replace the stored ones; the change is
  written back to the run (so later resumes keep it) and recorded as a
  `settings_changed` event.
- what is searched and what a verdict means: the task, the starting
  candidates, `[eval]`, `[eval.timing]` and the rest of `[search]` (backend,
  islands, ...). Changed midway, they would mix verdicts of two protocols in
  one archive, so a value that differs from the run's is refused (exit 2)
  by name; the same value again is fine, so a command line can be repeated
  with `--resume` added.

Flags that set no stored setting (`--gpus`, `--json`, `--quiet`) apply as usual.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kernelevo.config_file import BUDGET_KEYS, DEFAULT, Effective
from kernelevo.errors import ResumeConflict

# The settings a resume applies, by config section and key: {section: {key: value}}.
Overrides = dict[str, dict[str, Any]]
CHANGE_EVENT = "settings_changed"
APPLIED_TABLES = ("budget", "llm")
# [search] keys that set only the pace: how many LLM calls and builds run at once.
# and where the judging runs (a run may move to another cluster).
APPLIED_SEARCH_KEYS = ("llm_in_flight", "queued_per_worker", "build_workers", "lanes", "cluster",
                       "cluster_slots", "cluster_timeout_s")


@dataclass(frozen=True)
class Given:
    """A setting given with --resume that must equal the run's: where it was given, its value."""

    table: str
    key: str
    value: Any
    source: str  # the flag ("--precision"), "config file PATH" or "argument"

    def describe(self, stored: Any) -> str:
        return f"{self.source} ([{self.table}] {self.key} = {self.value!r}; the run's: {stored!r})"


def split_given(effective: Effective) -> tuple[Overrides, list[Given]]:
    """The settings given (not defaults): those to apply, in the run config's sections and
    keys, and those that must match the run's."""
    overrides: Overrides = {}
    fixed: list[Given] = []
    stored_key = {file_key: name for name, file_key in BUDGET_KEYS.items()}
    for table, sources in effective.sources.items():
        for key, source in sources.items():
            if source == DEFAULT:
                continue
            value = effective.values[table][key]
            if table in APPLIED_TABLES or (table == "search" and key in APPLIED_SEARCH_KEYS):
                name = stored_key.get(key, key) if table == "budget" else key
                overrides.setdefault(table, {})[name] = value
            else:
                fixed.append(Given(table, key, value, source))
    return overrides, fixed


def changed_settings(fixed: list[Given], stored: dict[str, Any]) -> list[str]:
    """Each setting of `fixed` whose value differs from the run's, described for a message.

    `stored` holds the run's settings objects by table (config_file.by_table):
    EvalConfig for "eval", its TimingConfig for "eval.timing", SearchConfig for "search".
    """
    return [given.describe(getattr(stored[given.table], given.key)) for given in fixed
            if getattr(stored[given.table], given.key) != given.value]


def refuse(run_id: str, problems: list[str]) -> None:
    """Raise ResumeConflict naming every setting that would change what the run means."""
    if problems:
        raise ResumeConflict(
            f"cannot resume run {run_id} with settings it was not started with: "
            f"{'; '.join(problems)}. The task, the starting candidates, [eval], "
            f"[eval.timing] and the search's shape decide what is searched and what a verdict "
            f"means, so a run keeps them: leave these out to resume, or start a new run. "
            f"Budgets, models, the endpoint and the pace (--llm-in-flight) may change on resume.")


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
