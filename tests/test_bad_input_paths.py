"""A path the user gives that is no file (or no folder) is named for what it is, with exit 2.

A folder, a named pipe, /dev/zero or /dev/null given where a file is read
used to read "file not found"; a pipe could block the command. Each error
here names the path, what it is and what to give instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from kernelevo.errors import KernelEvoError
from kernelevo.paths import check_file, check_folder, file_problem, folder_problem
from tests.conftest import ROOT
from tests.fakes import FakeOpenAIServer
from tests.test_bad_input import HONEST, TASK, cli, refused, said


@pytest.fixture
def odd_paths(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Paths that are no readable file, each with the words that must describe it."""
    folder = tmp_path / "a_folder"
    folder.mkdir()
    fifo = tmp_path / "a_fifo"
    os.mkfifo(fifo)
    empty = tmp_path / "empty.py"
    empty.write_text("")
    return {"folder": (str(folder), "is a folder, not a file"),
            "fifo": (str(fifo), "is a named pipe (FIFO), not a regular file"),
            "zero": ("/dev/zero", "is a character device, not a regular file"),
            "null": ("/dev/null", "is a character device, not a regular file"),
            "empty": (str(empty), "is empty"),
            "missing": (str(tmp_path / "missing.py"), "does not exist")}


KINDS = ["folder", "fifo", "zero", "null", "empty", "missing"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_that_is_no_file_says_what_it_is(odd_paths, kind):
    path, words = odd_paths[kind]
    refused(cli("eval", path, HONEST, "--local"), f"task {path} {words}",
            "give a KernelBench-format .py file")


@pytest.mark.parametrize("kind", KINDS)
def test_a_candidate_that_is_no_file_says_what_it_is(odd_paths, kind):
    path, words = odd_paths[kind]
    refused(cli("eval", TASK, path, "--local"), f"candidate {path} {words}",
            "give a .py file that defines class ModelNew")


@pytest.mark.parametrize("kind", ["folder", "fifo", "zero", "null"])
def test_a_seed_that_is_no_file_says_what_it_is_and_stores_no_run(tmp_path, odd_paths, kind):
    path, words = odd_paths[kind]
    runs = tmp_path / "runs"
    with FakeOpenAIServer(default="never") as server:
        done = cli("evolve", TASK, "--model", "gpt-4o", "--base-url", server.base_url,
                   "--device", "cpu", "--seed", path, "--runs-dir", str(runs))
    refused(done, f"starting candidate (--seed) {path} {words}")
    assert not runs.exists() or not list(runs.iterdir())


def test_a_model_file_that_is_a_folder_says_so(tmp_path):
    refused(cli("model", "profile", str(tmp_path), "--device", "cpu"),
            f"model file {tmp_path} is a folder, not a file", "build() -> (model, inputs)")


def test_suite_solutions_that_are_a_file_say_it_is_no_folder(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    refused(cli("suite", TASK, "--solutions", str(afile), "--out", str(tmp_path / "out")),
            f"--solutions {afile} is a file, not a folder",
            "give the folder that holds the candidate files")


def test_a_suite_task_that_is_a_pipe_is_refused_without_reading_it(odd_paths, tmp_path):
    path, words = odd_paths["fifo"]
    refused(cli("suite", path, "--solutions", str(tmp_path), "--out", str(tmp_path / "out")),
            f"task {path} {words}")


def test_suite_out_under_a_file_names_the_file(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    refused(cli("suite", TASK, "--solutions", str(tmp_path), "--out", str(afile / "sub")),
            f"--out {afile / 'sub'} cannot be made: {afile} is a file")


def test_suite_out_that_cannot_be_made_says_why(tmp_path):
    refused(cli("suite", TASK, "--solutions", str(tmp_path), "--out", "/proc/nope/suite"),
            "--out /proc/nope/suite: cannot make the folder",
            "give --out a folder you can write to")


# -- memory import and export ------------------------------------------------------------


def test_memory_import_of_a_pipe_is_refused_at_once(odd_paths, tmp_path):
    path, words = odd_paths["fifo"]
    done = cli("memory", "import", path, "--store", str(tmp_path / "m.db"))
    refused(done, f"memory export {path} {words}", "`kernelevo memory export`")


def test_memory_import_of_json_nested_too_deep_is_refused(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    refused(cli("memory", "import", str(deep), "--store", str(tmp_path / "m.db")),
            f"memory export {deep} nests its JSON too deeply")


def test_memory_import_of_no_json_says_so(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not json")
    refused(cli("memory", "import", str(text), "--store", str(tmp_path / "m.db")),
            f"memory export {text} is not JSON")


def test_memory_export_keeps_an_existing_file_unless_forced(tmp_path):
    store = str(tmp_path / "m.db")
    precious = tmp_path / "precious.json"
    precious.write_text("keep me")
    refused(cli("memory", "export", "-o", str(precious), "--store", store),
            f"{precious} exists: pass --force")
    assert precious.read_text() == "keep me"
    done = cli("memory", "export", "-o", str(precious), "--force", "--store", store)
    assert done.exit_code == 0, done.output
    assert json.loads(precious.read_text())["format"] == "kernelevo-memory"


def test_memory_export_into_a_folder_says_it_cannot_write(tmp_path):
    refused(cli("memory", "export", "-o", str(tmp_path), "--store", str(tmp_path / "m.db")),
            f"cannot write {tmp_path}", "give -o a file path")


# -- the helpers themselves --------------------------------------------------------------


def test_the_helpers_accept_what_they_should(tmp_path):
    assert file_problem(Path(TASK)) is None and folder_problem(ROOT) is None
    empty = tmp_path / "empty"
    empty.write_text("")
    assert file_problem(empty, empty_ok=True) is None
    assert folder_problem(tmp_path / "new" / "deeper", missing_ok=True) is None
    assert check_folder(tmp_path, "--out", "give a folder") == tmp_path
    with pytest.raises(KernelEvoError, match=r"^thing .*missing does not exist: give one$"):
        check_file(tmp_path / "missing", "thing", "give one")


# -- profile --ncu-path ------------------------------------------------------------------


def test_profile_refuses_an_ncu_path_that_is_no_program(tmp_path):
    missing = tmp_path / "ncu"
    refused(cli("profile", TASK, HONEST, "--ncu-path", str(missing)),
            f"--ncu-path {missing} does not exist", "leave out --ncu-path to use ncu from PATH")
    missing.write_text("not a program")
    refused(cli("profile", TASK, HONEST, "--ncu-path", str(missing)),
            f"--ncu-path {missing} is not executable")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_profile_says_why_nsight_compute_did_not_run_without_a_gpu(tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    done = cli("profile", TASK, HONEST, "--ncu-path", str(fake))
    assert done.exit_code == 0, done.output
    assert f"--ncu-path {fake}: Nsight Compute was not run" in said(done)
    assert "no kernel breakdown to measure (judged without a GPU)" in said(done)
