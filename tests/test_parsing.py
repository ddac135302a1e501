"""Every parse of KernelEvo's goes through kernelevo.parsing: one at a time, and once more
after CPython's spurious "AST constructor recursion depth mismatch" (python/cpython#106905)."""

import ast
import re
import threading
import time

import pytest

from kernelevo import parsing
from tests.conftest import ROOT


def test_no_module_parses_python_source_past_the_lock():
    direct = [f"{path.relative_to(ROOT)}:{number}"
              for path in sorted((ROOT / "src" / "kernelevo").rglob("*.py"))
              if path.name != "parsing.py"
              for number, line in enumerate(path.read_text().splitlines(), 1)
              if re.search(r"\bast\.parse\(|PyCF_ONLY_AST", line)]
    assert not direct, f"parse through kernelevo.parsing.parse_source: {direct}"


def test_parses_from_many_threads_run_one_at_a_time(monkeypatch):
    inside, most = 0, 0
    count_lock = threading.Lock()
    real = ast.parse

    def slow_parse(source, filename="<unknown>", *rest):
        nonlocal inside, most
        with count_lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.01)  # long enough for the other threads to arrive
        with count_lock:
            inside -= 1
        return real(source, filename, *rest)

    monkeypatch.setattr(ast, "parse", slow_parse)
    threads = [threading.Thread(target=parsing.parse_source, args=(f"x = {n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1


def test_the_spurious_mismatch_is_parsed_again_and_other_errors_stand(monkeypatch):
    real, calls = ast.parse, []

    def flaky(source, filename="<unknown>", *rest):
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=90, after=65)")
        return real(source, filename, *rest)

    monkeypatch.setattr(ast, "parse", flaky)
    assert isinstance(parsing.parse_source("y = 1").body[0], ast.Assign)
    assert len(calls) == 2

    def broken(source, filename="<unknown>", *rest):
        raise SystemError("something else")

    monkeypatch.setattr(ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        parsing.parse_source("y = 1")
    with pytest.raises(SyntaxError):
        monkeypatch.setattr(ast, "parse", real)
        parsing.parse_source("def (")
