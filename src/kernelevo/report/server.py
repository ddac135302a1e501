"""The local web UI: the runs, a live page per run, a page per candidate, JSON to poll.

A stdlib ThreadingHTTPServer, so the UI needs nothing to install. It keeps
no state: each request opens the run's database afresh, and WAL lets it read
while a search process writes, so a page always shows the run as it is now.
Routes:
    /                                    runs, and their best-so-far lines on one plot
    /run/<id>                            the report's views, refreshing while it runs
    /run/<id>/candidate/<candidate id>   code, diffs, verdict, logs, prompt and answer
    /api/run/<id>/summary                JSON the pages poll every 2 s
    /compare?runs=a,b                    several runs side by side

Bound beyond loopback it needs a token, as `kernelevo serve` does: the URL it
prints carries `?token=...`, which the first page trades for a cookie;
`Authorization: Bearer ...` works too. Anything else gets 401.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
import secrets
import sqlite3
import sys
import threading
import traceback
import webbrowser
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import kernelevo.report.html as html
import kernelevo.report.units as units
from kernelevo.errors import ConfigError, KernelEvoError
from kernelevo.evaluate.remote.address import bind_error, check_listen_host
from kernelevo.report.data import load_run, run_database
from kernelevo.report.detail import CandidateDetail, load_candidate_detail
from kernelevo.store.lock import status_now
from kernelevo.store.run_store import DB_NAME, RunStore
from kernelevo.store.listing import list_runs

# Run ids are folder names; anything else (slashes, '..') could leave runs_dir.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The front page plots this many of the newest runs; more would be unreadable.
INDEX_PLOT_RUNS = 10
TOKEN_ENV = "KERNELEVO_UI_TOKEN"
_COOKIE = "kernelevo_ui_token"
_MIN_TOKEN_CHARS = 16


class NotFound(Exception):
    """No such page, run or candidate."""


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes


def route(runs_dir: Path, path: str, query: dict[str, list[str]]) -> Response:
    """The response to a GET of `path`; raises NotFound for anything unknown."""
    parts = [unquote(part) for part in path.split("/") if part]
    match parts:
        case []:
            return _page(_index(runs_dir))
        case ["run", run_id]:
            return _page(_run_page(_run_path(runs_dir, run_id)))
        case ["run", run_id, "candidate", candidate_id]:
            return _page(html.render_candidate_page(_detail(runs_dir, run_id, candidate_id)))
        case ["api", "run", run_id, "summary"]:
            summary = live_summary(_run_path(runs_dir, run_id))
            return Response(200, "application/json", json.dumps(summary).encode())
        case ["compare"]:
            return _page(_comparison(runs_dir, query))
    raise NotFound(f"no page at {path}")


# The latest rendering of each run's page, kept while its files stand unchanged:
# every open tab refetches the page when a verdict lands, and drawing it takes
# most of a second at 200,000 candidates, so one drawing serves them all.
_PAGES: dict[Path, tuple[tuple[int, ...], str]] = {}
_PAGES_LOCK = threading.Lock()
PAGES_KEPT = 8


def _run_page(run_path: Path) -> str:
    """The run's page, drawn again only when run.db or its log changed since the last."""
    key = _files_state(run_database(run_path))
    with _PAGES_LOCK:
        kept = _PAGES.get(run_path)
    if kept is not None and kept[0] == key:
        return kept[1]
    text = html.render_run_page(load_run(run_path))
    with _PAGES_LOCK:
        _PAGES.pop(run_path, None)
        _PAGES[run_path] = (key, text)
        while len(_PAGES) > PAGES_KEPT:
            _PAGES.pop(next(iter(_PAGES)))
    return text


def _files_state(database: Path) -> tuple[int, ...]:
    """Size and change time of run.db and its WAL: every commit of a writer changes them."""
    state: list[int] = []
    for path in (database, database.with_name(database.name + "-wal")):
        try:
            found = path.stat()
        except FileNotFoundError:
            state += [-1, -1]
            continue
        state += [found.st_size, found.st_mtime_ns]
    return tuple(state)


def _run_path(runs_dir: Path, run_id: str) -> Path:
    if not _RUN_ID.fullmatch(run_id) or not (runs_dir / run_id / DB_NAME).is_file():
        raise NotFound(f"no run {run_id!r} in {runs_dir}")
    return runs_dir / run_id


def _detail(runs_dir: Path, run_id: str, candidate_id: str) -> CandidateDetail:
    run_path = _run_path(runs_dir, run_id)
    try:
        return load_candidate_detail(run_path, candidate_id)
    except KernelEvoError as exc:
        raise NotFound(str(exc)) from exc


def _index(runs_dir: Path) -> str:
    summaries = list_runs(runs_dir)
    readable = [summary for summary in summaries if not summary.problem]
    runs = [load_run(summary.path, views=False) for summary in readable[-INDEX_PLOT_RUNS:]]
    return html.render_index(runs_dir, summaries, runs)


def _comparison(runs_dir: Path, query: dict[str, list[str]]) -> str:
    # Both ?runs=a,b and the front page's checkboxes (?runs=a&runs=b) work.
    run_ids = [run_id for value in query.get("runs", []) for run_id in value.split(",") if run_id]
    if not run_ids:
        raise NotFound("no runs to compare: give /compare?runs=RUN_A,RUN_B")
    runs = [load_run(_run_path(runs_dir, run_id), views=False) for run_id in run_ids]
    return html.render_comparison(runs, ui=True)


def live_summary(run_path: Path) -> dict[str, Any]:
    """A cheap status for the UI's polling; `version` changes when the views would."""
    with RunStore.read(run_database(run_path)) as store:
        info, totals = store.run_info(), store.totals()
        status = status_now(info.status, Path(store.path).parent)
        best, baseline = store.briefs.best(), store.briefs.baseline()
        # Why there is no best needs every candidate; with a best, two indexed reads do.
        no_best = None if best else store.briefs.ranking(0).no_best_message()
    by_status = dict(sorted(totals.candidates_by_status.items()))
    answered_calls = totals.llm_calls - totals.llm_calls_in_flight
    return {
        "run_id": info.id, "task": info.task_name, "status": status,
        "candidates": sum(by_status.values()), "by_status": by_status,
        # One best kernel (see store_records.rank), as `show` and the report name it.
        "best_id": best.id if best else None,
        "best_speedup_vs_eager": best.speedup_vs_eager if best else None,
        "best_speedup_vs_compile": best.speedup_vs_compile if best else None,
        "no_best": no_best,
        "baseline_id": baseline.id if baseline else None,
        "baseline_speedup_vs_eager": baseline.speedup_vs_eager if baseline else None,
        "tokens": totals.tokens_in + totals.tokens_out, "cost_usd": totals.cost_usd,
        "llm_calls_in_flight": totals.llm_calls_in_flight,
        "text": {
            "status": status, "candidates": str(sum(by_status.values())),
            "tokens": units.tokens(totals.tokens_in + totals.tokens_out),
            "cost": units.usd(totals.cost_usd),
            "best": units.speedup(best.speedup_vs_eager if best else None),
        },
        # Elapsed-time events are left out: they tick every few seconds and
        # would redraw an unchanged page.
        "version": json.dumps([status, by_status, answered_calls], sort_keys=True),
    }


def _page(text: str, status: int = 200) -> Response:
    return Response(status, "text/html; charset=utf-8", text.encode())


def _error(status: int, message: str) -> Response:
    text = html.environment().get_template("error.html.j2").render(
        title=f"{status}: {message}", status=status, message=message, ui=True, live=None)
    return _page(text, status)


class _Handler(BaseHTTPRequestHandler):
    runs_dir = Path("runs")
    token: str | None = None  # None: no token asked (loopback)
    server_version = "kernelevo-ui"
    timeout = 30  # seconds a connection may sit without sending: a thread each

    def do_GET(self) -> None:  # noqa: N802 (the name http.server dispatches to)
        url = urlsplit(self.path)
        if self.token is not None and not self._authorised(url.path, parse_qs(url.query)):
            return
        try:
            response = route(self.runs_dir, url.path, parse_qs(url.query))
        except NotFound as exc:
            response = _error(404, str(exc))
        except (KernelEvoError, sqlite3.Error) as exc:
            response = _error(500, f"cannot read the run: {exc}")
        except Exception as exc:  # a bug in one page must not take the UI down
            traceback.print_exc(file=sys.stderr)
            response = _error(500, f"internal error: {exc}")
        self._send(response)

    def _authorised(self, path: str, query: dict[str, list[str]]) -> bool:
        """Whether the request carries the token; a token in the URL becomes a cookie."""
        assert self.token is not None
        given = query.pop("token", [""])[-1]
        if given and _same(given, self.token):
            # The token leaves the address bar: the cookie carries it from now on.
            where = path + (f"?{urlencode(query, doseq=True)}" if query else "")
            self._send(Response(303, "text/plain", b""), {
                "Location": where,
                "Set-Cookie": f"{_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"})
            return False
        bearer = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if _same(bearer, self.token) or _same(_cookie(self.headers.get("Cookie")), self.token):
            return True
        self._send(_error(401, "this UI needs its token: open the address it printed "
                               "(…/?token=...)"))
        return False

    def _send(self, response: Response, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.send_header("Cache-Control", "no-store")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.body)
        except OSError:
            pass  # the browser left (closed the tab, navigated on) before the reply

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        # Quiet: every open page polls every 2 s, which would flood the terminal.
        return


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(errors="replace"), token.encode())


def _cookie(header: str | None) -> str:
    try:
        morsel = SimpleCookie(header or "").get(_COOKIE)
    except CookieError:
        return ""
    return morsel.value if morsel else ""


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def ui_token(host: str) -> str | None:
    """The token a UI on `host` asks for: KERNELEVO_UI_TOKEN, else None on loopback, else new."""
    token = os.environ.get(TOKEN_ENV, "")
    if token and len(token) < _MIN_TOKEN_CHARS:
        raise ConfigError(f"{TOKEN_ENV} has {len(token)} characters: give one of "
                          f"{_MIN_TOKEN_CHARS} or more, or unset it for a random one")
    if token:
        return token
    return None if is_loopback(host) else secrets.token_urlsafe(24)


def make_server(runs_dir: Path, host: str = "127.0.0.1", port: int = 8765,
                token: str | None = None) -> ThreadingHTTPServer:
    """A UI server over `runs_dir`, bound but not yet serving; port 0 picks a free one.

    With a token, every request must carry it (see the module's docstring).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"port {port!r} is not a port: give 0 to 65535 (0: any free one)")
    check_listen_host(host)
    handler = type("RunsHandler", (_Handler,), {"runs_dir": Path(runs_dir), "token": token})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise bind_error(host, port, exc) from None
    server.daemon_threads = True  # a hung browser connection must not block shutdown
    return server


def serve(runs_dir: Path, host: str = "127.0.0.1", port: int = 8765,
          open_browser: bool = False) -> None:
    """Serve the UI until interrupted (Ctrl-C); beyond loopback, behind a token."""
    check_listen_host(host)  # before a token is made for an address that is none
    token = ui_token(host)
    server = make_server(runs_dir, host, port, token)
    bound_host, bound_port = server.server_address[:2]
    assert isinstance(bound_host, str)  # an inet socket's bound name; the stub allows bytes too
    shown = "127.0.0.1" if bound_host in ("0.0.0.0", "::") else bound_host
    url = f"http://{shown}:{bound_port}/" + (f"?token={token}" if token else "")
    print(f"KernelEvo UI for {runs_dir} at {url} (Ctrl-C to stop)", file=sys.stderr)
    if not is_loopback(host):
        print(f"listening on {host}, beyond this machine: plain HTTP, so anyone who sees "
              "the token can read every run; prefer 127.0.0.1 and an SSH tunnel",
              file=sys.stderr)
    # The pages' templates compile beside the first requests, not in the first
    # run page's answer.
    threading.Thread(target=html.warm_templates, name="ui-templates", daemon=True).start()
    if open_browser:
        webbrowser.open(url)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
