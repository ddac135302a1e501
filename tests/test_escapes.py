"""Escapes candidates tried (issue 24), each contained by the sandbox itself.

The candidates under fixtures/escapes run through the real judge with the
static checks off, so only the kernel's confinement (confine.py) stands in
the way: each must end as a clean rejection or a contained failure, with
nothing read, written or left running outside. With the checks on, a static
rejection may come first.
"""

import errno
import json
import os
import subprocess
import sys
import time
import uuid
from multiprocessing import forkserver
from pathlib import Path

import pytest

from kernelevo.cache_dir import default_cache_dir
from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.sandbox import confine
from kernelevo.evaluate.sandbox import namespaces
from kernelevo.evaluate.sandbox.jobs import run_job
from kernelevo.task import load_task
from tests.conftest import ROOT

ESCAPES = ROOT / "tests/fixtures/escapes"
TASK = ROOT / "tests/fixtures/tasks/add.py"
KEY = f"sk-test-{uuid.uuid4().hex}"
TOKEN = f"service-token-{uuid.uuid4().hex}"
# A user's secrets under names that do not look secret: only the allow-list keeps them out.
DATABASE_URL = f"postgres://admin:{uuid.uuid4().hex}@db.internal/production"
GITHUB_PAT = f"ghp_{uuid.uuid4().hex}"

# Acceptable reasons with every check on, and with the static checks off.
EXPECTED = {
    "read_file.py": ({"try_fallback"}, {"forward_failed"}),
    "shared_write.py": ({"file_io"}, {"forward_failed"}),
    "pipepager.py": ({"spawned_process"}, {"spawned_process"}),
    "ctypes_system.py": ({"harness_introspection"}, {"spawned_process"}),
    "proc_reads.py": ({"try_fallback"}, {"forward_failed"}),
    "fork_alias.py": ({"dynamic_code"}, {"spawned_process"}),
}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the judge here runs as root; "
                                "without root the layers are a user namespace's, tried elsewhere")


@pytest.fixture(scope="module")
def secrets_around():
    """An API key and a user's secrets in the judge's environment, a service's token file in its cache.

    The forkserver starts again, so that it starts from an environment holding the key.
    """
    # A folder the host does not have, so that the candidate makes it (in its own /tmp).
    outside = Path(f"/tmp/kernelevo-escape-{uuid.uuid4().hex}")
    record = default_cache_dir() / "service.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"url": "http://127.0.0.1:9", "token": TOKEN, "pid": 0}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", KEY)
        patch.setenv("DATABASE_URL", DATABASE_URL)
        patch.setenv("GITHUB_PAT", GITHUB_PAT)
        patch.setenv("KERNELEVO_TEST_OUTSIDE", str(outside))
        forkserver._forkserver._stop()
        yield outside
    record.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def judges(secrets_around):
    return {static: Judge(load_task(str(TASK)), EvalConfig(static_checks=static, timeout_s=60))
            for static in (True, False)}


def _evaluate(judges, name: str, static: bool = False, monkeypatch=None):
    mark = f"kernelevo-escape-{uuid.uuid4().hex}"
    if monkeypatch is not None:
        monkeypatch.setenv("KERNELEVO_TEST_MARK", mark)
    verdict = judges[static].evaluate(load_candidate(str(ESCAPES / name)))
    return verdict, mark


def _running(mark: str, wait_s: float = 2.0) -> list[int]:
    """Live processes whose command line carries `mark`, after at most `wait_s` for them to go."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and mark.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _text(verdict) -> str:
    return verdict.message + "\n" + verdict.logs


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_with_every_check_an_escape_is_rejected_or_contained(judges, name, monkeypatch):
    verdict, mark = _evaluate(judges, name, static=True, monkeypatch=monkeypatch)
    assert verdict.reason in EXPECTED[name][0], (verdict.reason, verdict.message)
    assert _running(mark) == []


def test_a_read_and_raised_file_brings_back_nothing_of_the_machine(judges, monkeypatch):
    verdict, _ = _evaluate(judges, "read_file.py", monkeypatch=monkeypatch)
    assert verdict.reason in EXPECTED["read_file.py"][1], verdict.message
    # The read itself succeeded (so the message would carry it), on stand-in accounts.
    assert "sandbox:x:" in verdict.message
    for line in Path("/etc/passwd").read_text().splitlines():
        assert line not in _text(verdict)
    # The service's token file is not there to read; nothing needed redacting.
    assert "FileNotFoundError" in verdict.message
    assert TOKEN not in _text(verdict) and "[redacted]" not in _text(verdict)
    # The candidate's own lines, none of the judge's.
    assert 'raise RuntimeError("\\n".join(stolen))' in verdict.message
    assert "kernelevo/evaluate" not in verdict.message and str(ROOT) not in verdict.message


def test_a_shared_file_mapping_writes_nothing_outside(judges, secrets_around, monkeypatch):
    verdict, _ = _evaluate(judges, "shared_write.py", monkeypatch=monkeypatch)
    assert verdict.reason in EXPECTED["shared_write.py"][1], verdict.message
    assert "Read-only file system" in verdict.message  # beside Python's files
    # The temporary folder's write went to the sandbox's own /tmp, gone with it.
    assert not secrets_around.exists()
    assert not (Path(sys.prefix) / "escape-written.bin").exists()


@pytest.mark.parametrize("name", ["pipepager.py", "ctypes_system.py", "fork_alias.py"])
def test_a_detached_process_is_found_and_dies_with_the_job(judges, name, monkeypatch):
    verdict, mark = _evaluate(judges, name, monkeypatch=monkeypatch)
    assert verdict.reason in EXPECTED[name][1], verdict.message
    assert verdict.status == "rejected"
    assert _running(mark) == []
    assert not (Path(sys.prefix) / "escape-system.txt").exists()


def test_proc_shows_no_secret_and_no_process_of_the_judge(judges, monkeypatch):
    verdict, _ = _evaluate(judges, "proc_reads.py", monkeypatch=monkeypatch)
    assert verdict.reason in EXPECTED["proc_reads.py"][1], verdict.message
    assert "PATH=" in verdict.message  # its own environment was read and sent back
    assert KEY not in _text(verdict) and "[redacted]" not in _text(verdict)
    assert DATABASE_URL not in _text(verdict) and GITHUB_PAT not in _text(verdict)
    # The parent (its keeper, root's) is not in its /proc: neither environment nor command line.
    assert "multiprocessing.forkserver" not in verdict.message
    assert "FileNotFoundError" in verdict.message


def test_the_verdict_names_every_layer_in_force(judges, monkeypatch):
    verdict, _ = _evaluate(judges, "pipepager.py", monkeypatch=monkeypatch)
    for layer in ("network off", "own root:", "other users' processes hidden",
                  "every process the job starts dies with it",
                  f"runs as an unprivileged user (uid {confine.SANDBOX_ID})",
                  "signals and traces only within the job (Landlock)",
                  "an allow-listed environment, no secrets"):
        assert layer in verdict.isolation


def test_without_confinement_the_second_line_redacts_the_token(judges, monkeypatch):
    monkeypatch.setenv(confine.SWITCH, "0")
    verdict, _ = _evaluate(judges, "read_file.py", monkeypatch=monkeypatch)
    assert "confinement off (KERNELEVO_CONFINE=0)" in verdict.isolation
    assert TOKEN not in _text(verdict) and "[redacted]" in verdict.message


def leave_a_process_behind(payload, channel):
    """Stop being the reaper of its orphans, then detach a process with no marker."""
    namespaces.prctl(namespaces.PR_SET_CHILD_SUBREAPER, 0)
    subprocess.Popen(["env", "-i", "setsid", "sh", "-c", "sleep 600; true", payload["mark"]])
    channel.send("left")
    if payload["hang"]:
        time.sleep(600)


def say_hello(payload, channel):
    channel.send("hello")


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A forkserver done with its imports, so that a job's short limit is all its own."""
    run_job(say_hello, {}, tmp_path_factory.mktemp("warm"), timeout_s=300,
            output_limit_bytes=1 << 20)


@pytest.mark.parametrize("hang", [False, True], ids=["ends", "killed"])
def test_the_keeper_kills_what_left_the_worker(tmp_path, hang, warm):
    mark = f"kernelevo-escape-{uuid.uuid4().hex}"
    result = run_job(leave_a_process_behind, {"mark": mark, "hang": hang}, tmp_path / "job",
                     timeout_s=5, output_limit_bytes=1 << 20)
    assert [m["kind"] for m in result.messages] == ["isolation", "left"], (
        result.exit_code, result.log_tail)
    assert result.timed_out == hang
    assert _running(mark, wait_s=0) == []


def reach_the_judge(payload, channel):
    """What a worker can do to the judge's process: see it, read it, signal it."""
    judge, found = payload["judge"], {}
    found["seen"] = str(judge) in os.listdir("/proc")
    try:
        os.kill(judge, 0)
        found["signal"] = "allowed"
    except OSError as exc:
        found["signal"] = exc.strerror
    channel.send("reach", uid=os.getuid(), **found)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_no_worker_reaches_the_judge_even_as_root(tmp_path, device):
    # A GPU job's worker keeps root's uid (CUDA IPC needs one user): the user
    # namespace, hidepid and Landlock's scope must hold it all the same.
    result = run_job(reach_the_judge, {"judge": os.getpid(), "device": device},
                     tmp_path / "job", timeout_s=60, output_limit_bytes=1 << 20)
    (reach,) = [m for m in result.messages if m["kind"] == "reach"]
    assert reach["uid"] == (0 if device == "cuda" else confine.SANDBOX_ID)
    assert not reach["seen"] and reach["signal"] == "Operation not permitted"
    assert "signals and traces only within the job (Landlock)" in result.confinement


def _in_child(work):
    """The result of `work()` computed in a forked child (JSON over a pipe)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as handle:
        text = handle.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def test_a_layer_the_kernel_refuses_is_named_with_its_reason(tmp_path, monkeypatch):
    def refused(flags):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(namespaces, "unshare", refused)
    plan = confine.plan_for(tmp_path, {})
    assert _in_child(lambda: confine.enter_root(plan)) == [
        "filesystem shared (Operation not permitted)"]
    unprivileged = confine.Plan((), (), (), "/", False, None)
    assert _in_child(lambda: confine.drop_privileges(unprivileged)) == (
        "keeps its privileges (Operation not permitted)")
    monkeypatch.setenv(confine.SWITCH, "0")
    assert confine.confine(confine.plan_for(tmp_path, {})) == (
        ["confinement off (KERNELEVO_CONFINE=0)"], False)
