"""A child's last messages are read even when it ends between two polls of its pipe.

The judge's pump polls the pipe, then asks whether the child is alive. A
child that sends its report and exits in between leaves the report in the
pipe; the pump must read it before it gives up on the child, or the verdict
says the child exited without reporting.
"""

import multiprocessing
import time

from kernelevo.evaluate.sandbox.jobs import Deadline, run_job
from kernelevo.evaluate.sandbox.pipe import JobResult, pump


class _Ended:
    """A child process that has already ended."""

    def is_alive(self) -> bool:
        return False

    def join(self, timeout: float | None = None) -> None:
        return None


class _PollsEmptyOnce:
    """The parent's end of a pipe whose first poll saw nothing yet (the race)."""

    def __init__(self, connection) -> None:
        self.connection, self.polls = connection, 0

    def poll(self, timeout: float = 0.0) -> bool:
        self.polls += 1
        return False if self.polls == 1 else self.connection.poll(timeout)

    def recv_bytes(self) -> bytes:
        return self.connection.recv_bytes()

    def send_bytes(self, data: bytes) -> None:
        self.connection.send_bytes(data)


def test_messages_sent_before_the_end_are_read(tmp_path):
    parent_end, child_end = multiprocessing.Pipe()
    child_end.send_bytes(b'{"kind": "timing", "ms": 1.5}')
    child_end.send_bytes(b'{"kind": "done"}')
    child_end.close()  # the child has exited
    result, heard = JobResult(), []
    deadline = Deadline()
    deadline.restart(5.0)
    pump(_Ended(), _PollsEmptyOnce(parent_end), result, deadline, tmp_path / "log",
          10_000, lambda m: heard.append(m["kind"]) or None, [])
    assert heard == ["timing", "done"]
    assert [m["kind"] for m in result.messages] == ["timing", "done"]


def test_an_ended_child_with_nothing_sent_ends_the_pump(tmp_path):
    parent_end, child_end = multiprocessing.Pipe()
    child_end.close()
    result = JobResult()
    deadline = Deadline()
    deadline.restart(5.0)
    started = time.monotonic()
    pump(_Ended(), _PollsEmptyOnce(parent_end), result, deadline, tmp_path / "log",
          10_000, None, [])
    assert result.messages == [] and not result.timed_out
    assert time.monotonic() - started < 2.0


def _report_and_exit(payload, channel):
    for number in range(payload["count"]):
        channel.send("report", number=number)


def test_a_real_child_that_reports_as_it_exits_is_heard_every_time(tmp_path):
    for attempt in range(5):
        result = run_job(_report_and_exit, {"count": 3}, tmp_path / f"job{attempt}",
                         timeout_s=30, output_limit_bytes=100_000)
        assert result.exit_code == 0
        assert [m.get("number") for m in result.messages if m.get("kind") == "report"] \
            == [0, 1, 2]


class _Endless:
    """A pipe that a process the child left behind keeps writing to."""

    def poll(self, timeout: float = 0.0) -> bool:
        return True

    def recv_bytes(self) -> bytes:
        return b'{"kind": "progress", "phase": "again"}'

    def send_bytes(self, data: bytes) -> None:
        pass


def _pumped(process, limit_s: float, log) -> tuple[JobResult, float]:
    """What the pump kept of an endless pipe, and the seconds it took."""
    result = JobResult()
    deadline = Deadline()
    deadline.restart(limit_s)
    started = time.monotonic()
    pump(process, _Endless(), result, deadline, log, 10_000, None, [])
    return result, time.monotonic() - started


def test_a_pipe_written_on_after_the_child_ended_does_not_keep_the_judge(tmp_path):
    from kernelevo.evaluate.sandbox import pipe

    result, took_s = _pumped(_Ended(), 5.0, tmp_path / "log")
    # the pump's first poll reads one; the drain after the end at most its few more
    assert 1 <= len(result.messages) <= 1 + pipe.LAST_MESSAGES
    assert took_s < 2.0


class _Alive(_Ended):
    def is_alive(self) -> bool:
        return True


def test_a_child_that_writes_without_end_is_stopped_at_its_limit(tmp_path):
    result, took_s = _pumped(_Alive(), 0.3, tmp_path / "log")
    assert result.timed_out
    assert 0.3 <= took_s < 2.0
