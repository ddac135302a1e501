"""Children run in an empty network namespace where the OS allows it, and say so."""

import os
import socket
import threading

import pytest

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT

TASK = ROOT / "tests/fixtures/tasks/add.py"
PROBE = ROOT / "tests/fixtures/candidates/network_probe.py"


@pytest.fixture()
def listening_port(monkeypatch):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    # Every connection is taken, however many: the worker's rotation check calls
    # the probe for at least 1.5 s, so a fast machine makes more calls than a slow one.
    threading.Thread(target=_accept_until_closed, args=(server,), daemon=True).start()
    monkeypatch.setenv("KERNELEVO_TEST_PORT", str(port))
    yield port
    server.close()


def _accept_until_closed(server: socket.socket) -> None:
    while True:
        try:
            connection, _ = server.accept()
        except OSError:  # the fixture closed the socket
            return
        connection.close()


def _judge(isolate: bool) -> Judge:
    # One size: every call of the probe opens a connection.
    return Judge(load_task(str(TASK)), EvalConfig(static_checks=False, isolate_network=isolate,
                                                  vary_shapes=False))


@pytest.mark.skipif(os.geteuid() != 0, reason="an unprivileged unshare of the network needs "
                    "user namespaces, which may be off")
def test_candidate_cannot_reach_a_local_server(listening_port):
    verdict = _judge(True).evaluate(load_candidate(PROBE))
    assert verdict.status == "runtime_error", verdict.message
    assert "network off" in verdict.isolation
    assert "unreachable" in verdict.message.lower()


def test_without_isolation_the_same_candidate_connects(listening_port):
    verdict = _judge(False).evaluate(load_candidate(PROBE))
    assert verdict.status == "ok", verdict.message
    assert "network shared" in verdict.isolation
    # Judged on the CPU: no CUDA context was made, so none is claimed.
    assert "CUDA" not in verdict.isolation
