"""A real `kernelevo serve` process against malformed, slow, hung and abandoned requests (CPU)."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelevo.errors import ConfigError
from kernelevo.evaluate.parent.gate import GateAbandoned, GpuGate
from kernelevo.evaluate.protocol import JudgeJob
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
TASK = FIXTURES / "tasks" / "add.py"
HONEST = FIXTURES / "candidates" / "honest_add.py"
HANGS = FIXTURES / "candidates" / "python_infinite_loop.py"  # forward never returns
READ_TIMEOUT_S = 2.0
MAX_TIMEOUT_S = 900.0  # the defaults (timeout_s 300, build_timeout_s 900) fit
# A hung job's own limit, far beyond what any test waits; unlike the default (300 s), so
# the job's settings differ from the other jobs' and it gets a judge of its own, not their
# warm one (judges are kept by settings, and equal settings share one).
HUNG_TIMEOUT_S = 299.0


class Service:
    """A `kernelevo serve` child process, its address, token and output."""

    def __init__(self, cache: Path, extra_environment: dict[str, str] | None = None) -> None:
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("KERNELEVO_SERVICE_URL", "KERNELEVO_SERVICE_TOKEN")}
        environment.update(KERNELEVO_CACHE_DIR=str(cache), TRITON_INTERPRET="1",
                           **(extra_environment or {}))
        self.output = cache / "serve.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kernelevo.cli.app", "serve", "--lanes", "2",
             "--read-timeout", str(READ_TIMEOUT_S), "--max-timeout", str(MAX_TIMEOUT_S)],
            env=environment, stdout=self.output.open("w"), stderr=subprocess.STDOUT)
        self.record = cache / "service.json"
        deadline = time.monotonic() + 120
        while not self.record.exists():
            assert self.process.poll() is None, self.output.read_text()
            assert time.monotonic() < deadline, "the service did not start in 120 s"
            time.sleep(0.2)
        record = json.loads(self.record.read_text())
        self.token = record["token"]
        self.port = int(record["url"].rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        return self.output.read_text()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = Service(tmp_path_factory.mktemp("serve"))
    try:
        yield running
    finally:
        running.stop()


def _raw(service: Service, data: bytes, wait_s: float = 30.0,
         close_after_s: float | None = None) -> tuple[int | None, str, float]:
    """(status or None when dropped, body, seconds until answered or dropped) of raw bytes."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", service.port), timeout=wait_s) as connection:
        connection.sendall(data)
        if close_after_s is not None:
            time.sleep(close_after_s)
            return None, "", time.monotonic() - started
        received = b""
        try:
            while chunk := connection.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    seconds = time.monotonic() - started
    if not received:
        return None, "", seconds
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace"), seconds


def _post(service: Service, body: bytes, token: str | None = None,
          headers: str | None = None) -> bytes:
    if headers is None:
        headers = f"Content-Length: {len(body)}\r\n"
    token = service.token if token is None else token
    return (f"POST /v1/judge HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"{headers}\r\n").encode() + body


def _job(candidate: Path = HONEST, **settings: object) -> dict:
    return {"version": 1, "task_name": "add", "task_source": TASK.read_text(),
            "candidates": [[candidate.read_text(), "triton"]],
            "eval": {"device": "cpu", **settings}, "timed": True, "gpu": None,
            "task_path": str(TASK)}


def _judge(service: Service, job: dict) -> tuple[int | None, str, float]:
    return _raw(service, _post(service, json.dumps(job).encode()), wait_s=180)


def _health(service: Service) -> dict:
    request = (f"GET /v1/health HTTP/1.1\r\nAuthorization: Bearer {service.token}\r\n\r\n")
    status, body, _ = _raw(service, request.encode(), wait_s=5)
    assert status == 200
    return json.loads(body)


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
        except (OSError, ValueError):
            continue
        if proc.name.isdigit():
            parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _spinning(pids: set[int], over_s: float = 1.0) -> set[int]:
    """The processes among `pids` that used a fifth of a core or more over `over_s`."""
    def ticks(pid: int) -> int:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return -1
        return int(fields[11]) + int(fields[12])

    before = {pid: ticks(pid) for pid in pids}
    time.sleep(over_s)
    per_second = os.sysconf("SC_CLK_TCK")
    return {pid for pid, start in before.items()
            if start >= 0 and ticks(pid) - start >= 0.2 * per_second * over_s}


def _wait_until(condition, timeout_s: float) -> float:
    """Seconds until `condition()` held; fails past `timeout_s`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s} s"
        time.sleep(0.1)
    return time.monotonic() - started


# Jobs and settings: checked without a process.

@pytest.mark.parametrize(("change", "named"), [
    ({"eval": {"timeout_s": math.nan}}, "eval.timeout_s"),
    ({"eval": {"timeout_s": math.inf}}, "eval.timeout_s"),
    ({"eval": {"timeout_s": -1}}, "eval.timeout_s"),
    ({"eval": {"timeout_s": "x"}}, "eval.timeout_s"),
    ({"eval": {"timeout_s": 10 ** 400}}, "eval.timeout_s"),
    ({"eval": {"timing": "x"}}, "eval.timing"),
    ({"eval": {"timing": {"target_ms": math.nan}}}, "eval.timing.target_ms"),
    ({"eval": {"input_sets": 10 ** 9}}, "eval.input_sets"),
    ({"eval": {"no_such_setting": 1}}, "eval.no_such_setting"),
    ({"task_path": "/etc"}, "task_path"),
    ({"task_path": "relative/task.py"}, "task_path"),
    ({"task_name": "../../etc/passwd"}, "task_name"),
    ({"task_name": "a/b"}, "task_name"),
    ({"task_name": ""}, "task_name"),
    ({"timed": "no"}, "timed"),
])
def test_a_malformed_job_is_refused_naming_its_field(change, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        JudgeJob.from_dict({**_job(), **change})


def test_a_job_from_another_host_keeps_its_settings_but_names_no_folder_here():
    job = JudgeJob.from_dict({**_job(timeout_s=5), "task_path": "/no/such/host/task.py"})
    assert job.config().timeout_s == 5.0 and job.task().folder == ""
    assert JudgeJob.from_dict(_job()).task().folder == str(TASK.parent)


def test_a_gate_wait_gives_up_when_told():
    gate = GpuGate()
    gate.acquire_shared()  # a hung check holds the GPU
    stop = threading.Event()
    outcome: list[BaseException] = []

    def timing() -> None:
        try:
            gate.acquire_exclusive(stop.is_set)
        except GateAbandoned as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=timing)
    waiter.start()
    time.sleep(0.3)
    stop.set()
    waiter.join(2)
    assert not waiter.is_alive() and outcome
    # The writer that gave up no longer holds new checks back.
    gate.acquire_shared()
    assert gate.holders() == (2, False)


# The HTTP side, against the real process.

@pytest.mark.parametrize(("request_bytes", "status", "said"), [
    (b"Content-Length: abc\r\n", 400, "Content-Length"),
    (b"Content-Length: -5\r\n", 400, "Content-Length"),
    (b"Transfer-Encoding: chunked\r\n", 411, "Content-Length"),
    (b"", 411, "Content-Length"),
    (b"Content-Length: 99999999999\r\n", 413, "bytes"),
])
def test_a_bad_content_length_is_answered_before_the_body_is_read(service, request_bytes,
                                                                  status, said):
    answered, body, seconds = _raw(service, _post(service, b"{}",
                                                   headers=request_bytes.decode()))
    assert (answered, seconds < 2) == (status, True) and said in json.loads(body)["error"]


def test_a_request_without_the_token_is_refused_before_its_body_is_read(service):
    status, body, seconds = _raw(service, _post(service, b"{", token="wrong",
                                                headers="Content-Length: 1000\r\n"))
    assert status == 401 and seconds < 2


@pytest.mark.parametrize(("body", "said"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"\xff\xfe not json", "not JSON"),
    (json.dumps({**_job(), "eval": {"timing": "x"}}).encode(), "eval.timing"),
    (json.dumps({**_job(), "task_path": "/etc"}).encode(), "task_path"),
    (json.dumps({**_job(), "task_name": "../x"}).encode(), "task_name"),
    (json.dumps(_job(timeout_s=MAX_TIMEOUT_S * 10)).encode(), "--max-timeout"),
    (json.dumps(_job()).replace('"device": "cpu"', '"timeout_s": NaN').encode(),
     "eval.timeout_s"),
])
def test_a_malformed_job_is_answered_400_naming_its_field(service, body, said):
    status, answer, seconds = _raw(service, _post(service, body))
    assert status == 400 and seconds < 5
    assert said in json.loads(answer)["error"]


def test_a_huge_body_is_refused_without_being_read(service):
    """20 MB sent as declared: 413 from its header, the rest read away briefly, then closed."""
    body = b"x" * (20 << 20)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as connection:
        try:
            connection.sendall(_post(service, body))
            answer = connection.recv(4096)
        except (BrokenPipeError, ConnectionResetError):
            answer = b""  # closed while still sending: dropped, as promised
    assert time.monotonic() - started < 5
    assert answer == b"" or answer.startswith(b"HTTP/1.1 413")


def test_slow_and_lying_requests_end_within_the_read_deadline(service):
    """A body shorter than its Content-Length, headers never finished: 408 or dropped."""
    lying = _post(service, b"{}", headers="Content-Length: 100\r\n")
    unfinished = b"POST /v1/judge HTTP/1.1\r\nContent-Le"
    results: list[tuple[int | None, str, float]] = []
    threads = [threading.Thread(target=lambda data=data: results.append(_raw(service, data)))
               for data in [lying, unfinished] * 5]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    assert _health(service)["ok"]  # answered while ten connections hang
    for thread in threads:
        thread.join(30)
    assert len(results) == 10
    for status, _, seconds in results:
        assert status in (408, None) and seconds < READ_TIMEOUT_S + 2


def test_a_nan_timeout_is_refused_and_the_service_keeps_judging(service):
    wedge = json.dumps(_job(HANGS, timeout_s=1.0)).replace("1.0}", "NaN}").encode()
    assert b"NaN" in wedge
    status, answer, _ = _raw(service, _post(service, wedge))
    assert status == 400 and "eval.timeout_s" in json.loads(answer)["error"]
    status, answer, _ = _judge(service, _job())
    assert status == 200 and json.loads(answer)["verdicts"][0]["reason"] == "passed", answer


def test_a_job_whose_client_leaves_is_cancelled_and_its_process_killed(service):
    before = _descendants(service.process.pid)
    hung = json.dumps(_job(HANGS, timeout_s=HUNG_TIMEOUT_S)).encode()
    client = socket.create_connection(("127.0.0.1", service.port))
    client.sendall(_post(service, hung))
    _wait_until(lambda: _spinning(_descendants(service.process.pid) - before, 0.5), 60)
    client.close()
    freed_s = _wait_until(lambda: sum(_health(service)["busy"].values()) == 0, 10)
    assert not _spinning(_descendants(service.process.pid) - before)
    assert freed_s < 5
    status, answer, _ = _judge(service, _job())
    assert status == 200 and json.loads(answer)["verdicts"][0]["reason"] == "passed", answer


def test_a_hung_job_does_not_hold_back_the_other_lane(service):
    hung = json.dumps(_job(HANGS, timeout_s=HUNG_TIMEOUT_S)).encode()
    client = socket.create_connection(("127.0.0.1", service.port))
    try:
        client.sendall(_post(service, hung))
        time.sleep(1)
        status, answer, seconds = _judge(service, _job())
        assert status == 200 and json.loads(answer)["verdicts"][0]["reason"] == "passed", answer
        assert seconds < HUNG_TIMEOUT_S / 10  # judged beside it, not after its limit
    finally:
        client.close()
    _wait_until(lambda: sum(_health(service)["busy"].values()) == 0, 10)


def test_the_service_logged_no_traceback(service):
    # Runs after the tests above (file order): none of their requests left one.
    assert "Traceback" not in service.log(), service.log()


def test_sigterm_stops_the_service_within_seconds_while_a_job_hangs(tmp_path):
    running = Service(tmp_path)
    try:
        started_with = _descendants(running.process.pid)
        hung = json.dumps(_job(HANGS, timeout_s=HUNG_TIMEOUT_S)).encode()
        answers: list[tuple[int | None, str, float]] = []
        client = threading.Thread(target=lambda: answers.append(
            _raw(running, _post(running, hung), wait_s=60)))
        client.start()
        _wait_until(lambda: _spinning(_descendants(running.process.pid) - started_with, 0.5),
                    60)
        children = _descendants(running.process.pid)
        sent = time.monotonic()
        running.process.send_signal(signal.SIGTERM)
        running.process.wait(30)
        stopped_s = time.monotonic() - sent
        client.join(30)
    finally:
        running.stop()
    assert stopped_s < 8, f"SIGTERM took {stopped_s:.1f} s"
    assert answers and answers[0][0] == 503  # the stopped job is told, not left hanging
    assert not running.record.exists()
    _wait_until(lambda: not [pid for pid in children if _alive(pid)], 5)


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.parametrize(("setting", "flag"), [("max_timeout_s", "--max-timeout"),
                                               ("read_timeout_s", "--read-timeout")])
@pytest.mark.parametrize("value", [math.nan, math.inf, 0, -1])
def test_the_service_limits_are_finite_and_positive(setting, flag, value):
    from kernelevo.evaluate.remote.service import ServiceSettings

    with pytest.raises(ConfigError, match=flag):
        ServiceSettings(**{setting: value})
