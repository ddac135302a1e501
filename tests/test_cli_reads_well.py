"""The command line reads well at 80 columns: help, usage, quiet and verbose output."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from kernelevo.cli.app import app

NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
COMMANDS = sorted(typer.main.get_command(app).commands)


def help_text(*command: str) -> str:
    done = CliRunner().invoke(app, [*command, "--help"], env=NARROW, prog_name="kernelevo")
    assert done.exit_code == 0, done.output
    return done.output


def flags_listed(text: str) -> list[str]:
    """The flag names in the left column of the Options section, in order."""
    options = text.split("Options:", 1)[1]
    names = []
    for line in options.splitlines():
        left = line[:34] if line.startswith("  -") else ""
        names += re.findall(r"(?<![\w-])--?[a-z][\w-]*", left)
    return names


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_each_flag_once_by_its_own_name(command: str) -> None:
    text = help_text(command)
    declared = {name for param in typer.main.get_command(app).commands[command].params
                for name in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ()))
                if name.startswith("-")}
    listed = flags_listed(text)
    assert sorted(listed) == sorted(declared | {"--help"}), text
    assert "--no-no-" not in text and "<bool>" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_help_keeps_bracketed_config_tables_in_its_text() -> None:
    flat = " ".join(help_text("eval").split())
    assert "TOML file of settings: [eval], [eval.timing], [search], [llm], [budget]" in flat


def test_usage_names_arguments_in_capitals() -> None:
    assert "Usage: kernelevo eval [OPTIONS] TASK CANDIDATE" in help_text("eval")
    assert "Usage: kernelevo compare [OPTIONS] TASK A B" in help_text("compare")
    assert "Usage: kernelevo evolve [OPTIONS] [TASK]" in help_text("evolve")
    assert "Usage: kernelevo report [OPTIONS] RUN..." in help_text("report")
    for command in COMMANDS:
        assert "{" not in help_text(command).splitlines()[0], command


def test_negative_flags_are_single_switches() -> None:
    text = help_text("eval")
    assert re.search(r"^  --no-compile\s+skip the torch.compile baseline", text, re.M), text
    assert re.search(r"^  --no-static\s+skip the static checks", text, re.M), text
    assert "--vary-shapes / --no-vary-shapes" in text  # on by default: both spellings count
