"""The sandbox's children: what they start with, and how they end when killed."""

import os
import signal
import sys
import tempfile
import time

import pytest
import torch

from kernelevo.evaluate.sandbox.jobs import run_job


def report_start(payload, channel):
    wanted = ("torch._dynamo", "torch._inductor.compile_fx", "torch.utils.cpp_extension",
              "triton.runtime.interpreter")
    channel.send("start", preloaded=sorted(m for m in wanted if m in sys.modules),
                 tempdir=tempfile.gettempdir(), taken=payload["taken"])


def sleep_forever(payload, channel):
    channel.send("sleeping")
    while True:
        time.sleep(1)


def report_death_wishes(payload, channel):
    import ctypes
    from multiprocessing import forkserver

    wanted = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(wanted), 0, 0, 0)  # PR_GET_PDEATHSIG
    # The judge counts the session: the worker's /proc shows no process of another user.
    channel.ask("death", parent_death_signal=wanted.value, session=os.getsid(0),
                alive_fd=forkserver._forkserver._forkserver_alive_fd)


def _session_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_children_die_with_their_parent_and_a_guard_watches_their_session(tmp_path):
    members = []

    def count_session(message):
        if message["kind"] == "death":
            members.extend(p for p in os.listdir("/proc")
                           if p.isdigit() and _session_of(int(p)) == message["session"])
            return {}
        return None

    result = run_job(report_death_wishes, {}, tmp_path / "job", timeout_s=60,
                     output_limit_bytes=1 << 20, on_message=count_session)
    (message,) = [m for m in result.messages if m["kind"] == "death"]
    assert message["parent_death_signal"] == signal.SIGKILL
    # The forkserver's "alive" pipe let go of, so it exits once the judge is gone.
    assert message["alive_fd"] is None
    assert len(members) == 3  # the keeper, its guard and the worker
    assert result.exit_code == 0, result.log_tail


def test_children_start_with_imports_done_and_their_own_temporary_folder(tmp_path):
    # The judge's process asks for the temporary folder first, as imports do.
    taken = tempfile.gettempdir()
    result = run_job(report_start, {"taken": taken}, tmp_path / "job", timeout_s=60,
                    output_limit_bytes=1 << 20)
    (message,) = [m for m in result.messages if m["kind"] == "start"]
    # Inductor only where torch is built for CUDA: only GPU timing compiles.
    gpu_build = torch.version.cuda is not None
    # What a worker imports once its candidates come, too (load_inline's hook, the knockout switch).
    assert message["preloaded"] == (["torch._dynamo"] + ["torch._inductor.compile_fx"] * gpu_build
                                    + ["torch.utils.cpp_extension", "triton.runtime.interpreter"])
    assert message["tempdir"].startswith(str(tmp_path / "job" / "work"))
    assert result.exit_code == 0 and not result.timed_out


def test_a_child_past_its_limit_is_killed_and_gone_before_the_job_returns(tmp_path):
    started = time.monotonic()
    result = run_job(sleep_forever, {}, tmp_path / "job", timeout_s=2,
                    output_limit_bytes=1 << 20)
    assert result.timed_out and result.signal_name == "SIGKILL"
    assert [m["kind"] for m in result.messages] == ["isolation", "sleeping"]
    assert 0.0 <= result.exit_wait_s < 5.0
    assert time.monotonic() - started < 15.0


_JUDGE_THEN_HANG = """
import sys
sys.path.insert(0, {src!r})
from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task
judge = Judge(load_task({task!r}), EvalConfig(timeout_s=600))
judge.evaluate(load_candidate({candidate!r}))
"""


def _tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries the tag (zombies have none)."""
    from pathlib import Path

    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if tag.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _in_worker_folder(pids: list[int]) -> bool:
    import os

    for pid in pids:
        try:
            if os.readlink(f"/proc/{pid}/cwd").endswith("/worker/work"):
                return True
        except OSError:
            continue
    return False


def test_a_judge_killed_outright_leaves_no_worker_behind(tmp_path):
    import os
    import signal
    import subprocess
    import uuid

    from tests.conftest import ROOT

    tag = f"KERNELEVO_TEST_TAG={uuid.uuid4().hex}"
    script = _JUDGE_THEN_HANG.format(
        src=str(ROOT / "src"), task=str(ROOT / "tests/fixtures/tasks/add.py"),
        candidate=str(ROOT / "tests/fixtures/candidates/python_infinite_loop.py"))
    name, value = tag.split("=")
    judge = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, name: value},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Wait until the worker runs: it is the tagged process in the worker's folder.
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not _in_worker_folder(_tagged_processes(tag)):
        time.sleep(0.5)
    assert _in_worker_folder(_tagged_processes(tag)), "the worker never started"
    time.sleep(3)  # into its endless forward call
    judge.send_signal(signal.SIGKILL)
    judge.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _tagged_processes(tag):
        time.sleep(0.5)
    assert _tagged_processes(tag) == [], "processes outlived the judge"
