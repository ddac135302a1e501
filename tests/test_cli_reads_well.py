"""The command line reads well at 80 columns: help, usage, quiet and verbose output."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner, Result

from kernelevo.candidate import Candidate
from kernelevo.cli.app import app
from kernelevo.evaluate.verdict import ErrorMetrics, Verdict
from kernelevo.render import distinct_names
from kernelevo.run.view import list_runs_table
from kernelevo.store.run_store import RunStore

NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
TASK, CANDIDATE = "tests/fixtures/tasks/add.py", "tests/fixtures/candidates/honest_add.py"
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


PASSING = Verdict(
    status="ok", reason="passed", message="",
    errors=ErrorMetrics(max_abs_error=2e-7, max_rel_error=1e-6, mismatch_fraction=0.0,
                        rel_l2_error=3e-7, atol=1e-4, rtol=1e-4),
    notes=("no GPU: correctness checked, timings unavailable",),
    phases_s={"load": 0.4, "check": 1.2}, environment={"device": "cpu"})


class _FakeService(BaseHTTPRequestHandler):
    """An evaluation service that judges every candidate as PASSING."""

    def do_GET(self) -> None:
        self._answer({"device": "cpu", "status": "ok"})

    def do_POST(self) -> None:
        job = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer({"verdicts": [PASSING.to_dict() for _ in job["candidates"]]})

    def _answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def service_env() -> Iterator[dict[str, str]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeService)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {**NARROW, "KERNELEVO_SERVICE_URL": f"http://127.0.0.1:{server.server_port}",
           "KERNELEVO_SERVICE_TOKEN": "t"}
    server.shutdown()


def judged(env: dict[str, str], *args: str) -> Result:
    done = CliRunner().invoke(app, list(args), env=env, prog_name="kernelevo")
    assert done.exit_code == 0, done.output
    return done


def test_a_passing_verdict_shows_its_accuracy_and_its_notes(service_env) -> None:
    done = judged(service_env, "eval", TASK, CANDIDATE)
    assert "OK  honest_add: passed" in done.stdout
    assert "accuracy: max abs error 2e-07" in done.stdout and "error:" not in done.stdout
    assert "note: no GPU" in done.stdout and "phases (s): load 0.40" in done.stdout


def test_quiet_prints_only_the_verdict_line(service_env) -> None:
    done = judged(service_env, "-q", "eval", TASK, CANDIDATE)
    first, *rest = done.stdout.strip().splitlines()
    assert first == "OK  honest_add: passed", done.stdout
    rest_said = " ".join(" ".join(rest).split())
    assert rest_said == "" or rest_said.startswith("judged on the service at"), done.stdout
    assert done.stderr.strip() == ""


def test_verbose_names_the_service_once(service_env) -> None:
    done = judged(service_env, "-v", "eval", TASK, CANDIDATE)
    assert done.stderr.count("judging on the evaluation service at") == 1, done.stderr


def test_compare_tells_apart_two_files_of_the_same_name(service_env, tmp_path) -> None:
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        shutil.copy(CANDIDATE, tmp_path / folder / "honest_add.py")
    done = judged(service_env, "compare", TASK, str(tmp_path / "first" / "honest_add.py"),
                  str(tmp_path / "second" / "honest_add.py"))
    assert "A first/honest_add.py: passed" in done.stdout
    assert "B second/honest_add.py: passed" in done.stdout


def test_distinct_names_use_the_shortest_telling_part_of_the_paths() -> None:
    assert distinct_names(Path("a/x.py"), Path("b/y.py")) == ("x", "y")
    assert distinct_names(Path("r/a/x.py"), Path("r/b/x.py")) == ("a/x.py", "b/x.py")
    assert distinct_names(Path("a/k/x.py"), Path("b/k/x.py")) == ("a/k/x.py", "b/k/x.py")
    assert distinct_names(Path("x.py"), Path("x.py")) == ("x", "x")


def test_runs_at_80_columns_shows_whole_cells_and_names_what_it_left_out(tmp_path) -> None:
    runs_dir = tmp_path / "runs"
    run_id = "20261130-054202-gemm-bias-relu-3c09"
    with RunStore.create(runs_dir, "gemm_bias_relu", "x = 1\n", {}, run_id=run_id) as store:
        store.add_candidate(Candidate("y = 2\n", "triton", origin="llm"))
        store.set_status("finished")
    console = Console(record=True, width=80, force_terminal=True, color_system=None)
    assert list_runs_table(console, runs_dir, plain=False) == 1
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if run_id in line).split()
    assert row == [run_id, "finished", "0/1", "-", "$0.0000"]
    assert "…" not in "\n".join(lines)
    assert "left out at this width: task, created, best vs compile, tokens" in lines[-1]
    wide = Console(record=True, width=200, force_terminal=True, color_system=None)
    list_runs_table(wide, runs_dir, plain=False)
    text = wide.export_text()
    assert "left out" not in text and "gemm_bias_relu" in text
