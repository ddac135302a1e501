"""A driver killed with SIGKILL: no candidate process outlives it; its run shows `interrupted`."""

import json
import os
import signal
import time

import pytest
from typer.testing import CliRunner

from kernelevo.cli.app import app
from kernelevo.cli.evolve import UNRECORDED_STOP
from kernelevo.store.run_store import RunStore
from tests.conftest import write
from tests.fakes.openai_server import Delay, FakeOpenAIServer
from tests.test_evolve_resume import _wait_for_verdicts
from tests.test_sigterm import SEED, TASK, assert_none_left, start, tagged

GRANDCHILD = "import time; time.sleep(600)  # started by the candidate"
# Starts a process of its own, then holds the GIL for minutes inside one C call:
# a thread of the child watching for the judge's death would never run.
HOG_WITH_GRANDCHILD = f'''
import subprocess
import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        subprocess.Popen([sys.executable, "-c", {GRANDCHILD!r}])
        sum(range(10**13))
        return x + y
'''


def wait_for_grandchild(tag: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in tagged(tag):
            try:
                if GRANDCHILD.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                    return
            except OSError:
                continue
        time.sleep(0.2)
    raise AssertionError(f"the candidate started no process within {timeout_s} s")


@pytest.mark.slow
def test_a_driver_killed_outright_leaves_no_candidate_or_its_children(tmp_path):
    tag = os.urandom(8).hex()
    hog = write(tmp_path, "hog.py", HOG_WITH_GRANDCHILD)
    process = start(tag, "eval", str(TASK), str(hog), "--timeout", "600", "--no-static")
    try:
        wait_for_grandchild(tag, 180)
        time.sleep(1)  # into the C call that holds the GIL
        os.kill(process.pid, signal.SIGKILL)  # the driver alone: its children get no signal
        process.wait(timeout=30)
    finally:
        process.kill()
    # The forkserver, the candidate's child and the process it started all end.
    assert_none_left(tag, timeout_s=10)


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300", "NO_COLOR": "1"})


@pytest.mark.slow
def test_a_run_whose_driver_was_killed_shows_interrupted_and_resumes(tmp_path):
    tag, runs = os.urandom(8).hex(), tmp_path / "runs"
    with FakeOpenAIServer([], default=Delay(30, "no kernel today")) as server:
        process = start(tag, "evolve", str(TASK), "--seed", str(SEED), "--candidates", "30",
                        "--model", "fake", "--base-url", server.base_url,
                        "--runs-dir", str(runs))
        try:
            db = _wait_for_verdicts(runs, 1, 240)
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        finally:
            process.kill()
        assert_none_left(tag, timeout_s=10)
        run_id = db.parent.name
        listed = cli("runs", "--json", "--runs-dir", str(runs))
        (entry,) = json.loads(listed.output)
        assert (entry["status"], entry["recorded_status"]) == ("interrupted", "running")
        table = cli("runs", "--runs-dir", str(runs))
        assert table.output.splitlines()[1].split()[:3] == [run_id, "add", "interrupted"]
        shown = " ".join(cli("show", run_id, "--runs-dir", str(runs)).output.split())
        assert "status interrupted" in shown and f"--resume {run_id}" in shown
        with RunStore.open(db) as store:  # looking wrote nothing
            assert store.run_info().status == "running" and store.events("interrupted") == []

        resumed = start(tag, "evolve", "--resume", run_id, "--candidates", "0",
                        "--runs-dir", str(runs))
        _, errors = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, errors[-3000:]
    with RunStore.open(db) as store:
        assert store.run_info().status == "finished"
        (event,) = store.events("interrupted")
    assert event.payload == {"signal": None, "cause": UNRECORDED_STOP}
