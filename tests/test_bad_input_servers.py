"""Servers and runs given wrongly: `serve`, `ui`, `runs` and resume say what is wrong, exit 2.

A host that is no address is told as such (not as a missing token, not as
a port to change); a port in use names the port; a runs folder that is a
file or missing is refused, folders without a run.db are named, and a run
that cannot be written is called read-only, not unreadable.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelevo.errors import ConfigError
from kernelevo.evaluate.remote.service import Service, ServiceSettings
from kernelevo.store.run_store import RunStore
from tests.test_bad_input import TASK, cli, refused

NO_ADDRESS = "999.1.1.1"


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_serve_on_a_port_in_use_names_the_port(taken_port, tmp_path):
    with pytest.raises(ConfigError, match=rf"port {taken_port} on 127.0.0.1 is in use by another "
                                          r"program: pick another --port \(0: any free one\)"):
        Service(ServiceSettings(port=taken_port), tmp_path)


def test_serve_command_on_a_port_in_use_exits_2(taken_port):
    refused(cli("serve", "--port", str(taken_port)), f"port {taken_port} on 127.0.0.1 is in use")


def test_serve_on_a_host_that_is_no_address_says_so_before_asking_for_a_token():
    done = cli("serve", "--host", NO_ADDRESS)
    refused(done, f"--host '{NO_ADDRESS}' is no valid address", "e.g. 127.0.0.1")
    assert "token" not in done.output


def test_serve_with_a_token_on_a_host_that_is_no_address_says_so(monkeypatch):
    monkeypatch.setenv("KERNELEVO_SERVICE_TOKEN", "a-token-of-more-than-16-characters")
    refused(cli("serve", "--host", NO_ADDRESS), f"--host '{NO_ADDRESS}' is no valid address")


def test_ui_on_a_host_that_is_no_address_says_so_not_to_pick_a_port(tmp_path):
    done = cli("ui", "--host", NO_ADDRESS, "--runs-dir", str(tmp_path))
    refused(done, f"--host '{NO_ADDRESS}' is no valid address")
    assert "--port" not in done.output


def test_ui_on_a_port_in_use_names_the_port(taken_port, tmp_path):
    refused(cli("ui", "--port", str(taken_port), "--runs-dir", str(tmp_path)),
            f"port {taken_port} on 127.0.0.1 is in use", "pick another --port")


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_ui_refuses_a_runs_folder_that_is_none(tmp_path, kind):
    path = tmp_path / "nope"
    if kind == "file":
        path.write_text("x")
    words = "does not exist" if kind == "missing" else "is a file, not a folder"
    refused(cli("ui", "--runs-dir", str(path), "--port", "0"),
            f"the runs folder {path} {words}", "give --runs-dir")


@pytest.mark.parametrize("as_json", [(), ("--json",)])
def test_runs_refuses_a_runs_folder_that_is_a_file(tmp_path, as_json):
    afile = tmp_path / "afile"
    afile.write_text("x")
    refused(cli("runs", "--runs-dir", str(afile), *as_json),
            f"the runs folder {afile} is a file, not a folder", "give --runs-dir")


def test_runs_names_folders_that_hold_no_run(tmp_path):
    with RunStore.create(tmp_path, "add", Path(TASK).read_text(), {}) as store:
        run_id = store.run_id
    (tmp_path / "copied-without-its-db").mkdir()
    (tmp_path / ".hidden").mkdir()
    done = cli("runs", "--runs-dir", str(tmp_path))
    assert done.exit_code == 0 and run_id in done.stdout
    assert "1 folder(s) in" in done.stderr and "hold no run.db" in done.stderr
    assert "copied-without-its-db" in done.stderr and ".hidden" not in done.stderr
    assert "copied-without-its-db" not in done.stdout  # what a script reads stays the list


def test_a_runs_folder_not_made_yet_is_no_error_for_runs(tmp_path):
    done = cli("runs", "--runs-dir", str(tmp_path / "not-yet"))
    assert done.exit_code == 0 and "no runs in" in done.output


# -- a run that cannot be written --------------------------------------------------------


@pytest.fixture
def read_only_run(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A stored run whose folder and run.db cannot be written, even by root (chattr +i)."""
    with RunStore.create(tmp_path, "add", Path(TASK).read_text(), {}) as store:
        run_id = store.run_id
    run_dir = tmp_path / run_id
    frozen = [run_dir / "run.db", run_dir]
    if os.geteuid() == 0:  # root writes through modes: only the immutable flag stops it
        if shutil.which("chattr") is None or subprocess.run(
                ["chattr", "+i", *map(str, frozen)], capture_output=True).returncode:
            pytest.skip("cannot make a file read-only for root here (no chattr +i)")
        undo = ["chattr", "-i", *map(str, frozen)]
    else:
        for path in frozen:
            path.chmod(path.stat().st_mode & ~0o222)
        undo = ["chmod", "-R", "u+w", str(run_dir)]
    try:
        yield tmp_path, run_id
    finally:
        subprocess.run(undo, check=True)


@pytest.mark.parametrize("command", [("evolve", "--resume"), ("migrate",)])
def test_writing_to_a_read_only_run_says_it_is_read_only(read_only_run, command):
    runs_dir, run_id = read_only_run
    done = cli(*command, run_id, "--runs-dir", str(runs_dir))
    refused(done, f"the run at {runs_dir / run_id} is read-only",
            "make the run's folder and its run.db writable")
    assert "not a readable run database" not in done.output
    assert cli("show", run_id, "--runs-dir", str(runs_dir)).exit_code == 0  # still readable
