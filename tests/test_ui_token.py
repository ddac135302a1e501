"""The web UI beyond loopback: a token in the URL, traded for a cookie; bad ports refused."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelevo.cli.app import app
from kernelevo.errors import ConfigError
from kernelevo.report import make_server
from kernelevo.report.server import TOKEN_ENV, ui_token
from tests.test_report import TIMED_RUN_ID, make_runs

TOKEN = "t" * 24


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    return make_runs(tmp_path_factory.getbasetemp() / "token-runs")


@contextmanager
def serving(runs_dir: Path, token: str | None) -> Iterator[int]:
    server = make_server(runs_dir, "127.0.0.1", 0, token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def get(port: int, path: str, headers: dict[str, str] | None = None
        ) -> tuple[int, dict[str, str], str]:
    """One GET, redirects not followed: (status, headers, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def test_a_ui_with_a_token_refuses_requests_without_it(runs):
    with serving(runs["dir"], TOKEN) as port:
        for path in ("/", f"/run/{TIMED_RUN_ID}", f"/api/run/{TIMED_RUN_ID}/summary"):
            status, _, page = get(port, path)
            assert status == 401 and "token" in page
        assert get(port, "/?token=wrong")[0] == 401
        assert get(port, "/", {"Authorization": "Bearer wrong"})[0] == 401
        assert get(port, "/", {"Cookie": "kernelevo_ui_token=wrong"})[0] == 401


def test_the_token_in_the_url_becomes_a_cookie_and_leaves_the_address(runs):
    with serving(runs["dir"], TOKEN) as port:
        status, headers, _ = get(port, f"/compare?runs=a&token={TOKEN}")
        assert status == 303 and headers["Location"] == "/compare?runs=a"
        cookie = headers["Set-Cookie"]
        assert cookie.startswith(f"kernelevo_ui_token={TOKEN};") and "HttpOnly" in cookie
        sent = {"Cookie": cookie.split(";")[0]}
        status, _, page = get(port, f"/run/{TIMED_RUN_ID}", sent)
        assert status == 200 and TIMED_RUN_ID in page
        assert get(port, f"/api/run/{TIMED_RUN_ID}/summary", sent)[0] == 200  # the polling
        assert get(port, "/", {"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_a_ui_without_a_token_serves_as_before(runs):
    with serving(runs["dir"], None) as port:
        assert get(port, "/")[0] == 200


def test_the_token_is_needed_beyond_loopback_only(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert ui_token("127.0.0.1") is None and ui_token("localhost") is None
    assert ui_token("::1") is None
    made = ui_token("0.0.0.0")
    assert made is not None and len(made) >= 16 and made != ui_token("0.0.0.0")
    assert ui_token("gpu-host.example") is not None  # a name may resolve anywhere
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert ui_token("0.0.0.0") == TOKEN and ui_token("127.0.0.1") == TOKEN
    monkeypatch.setenv(TOKEN_ENV, "short")
    with pytest.raises(ConfigError, match=TOKEN_ENV):
        ui_token("0.0.0.0")


@pytest.mark.parametrize("port", [-1, 65536, 70000])
def test_a_port_out_of_range_is_refused(tmp_path, port):
    with pytest.raises(ConfigError, match="0 to 65535"):
        make_server(tmp_path, "127.0.0.1", port)
    result = CliRunner().invoke(app, ["ui", "--runs-dir", str(tmp_path), "--port", str(port)])
    assert result.exit_code == 2 and "--port" in result.output
    assert "Traceback" not in result.output


def test_kernelevo_ui_beyond_loopback_prints_its_url_with_a_token(runs):
    environment = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    process = subprocess.Popen(
        [sys.executable, "-m", "kernelevo.cli.app", "ui", "--runs-dir", str(runs["dir"]),
         "--host", "0.0.0.0", "--port", "0"],
        env=environment, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        warning = process.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=([\w-]+)", line)
        assert found, line
        port, token = int(found.group(1)), found.group(2)
        assert "beyond this machine" in warning
        assert get(port, "/")[0] == 401
        assert get(port, f"/?token={token}")[0] == 303
        assert get(port, "/", {"Cookie": f"kernelevo_ui_token={token}"})[0] == 200
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
