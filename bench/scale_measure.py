"""What the commands of `kernelevo` cost on a generated run (bench/scale_realistic.py measure).

Each command runs as a user runs it, in its own process (`python -m
kernelevo.cli.app`, so PYTHONPATH picks the code measured); wall seconds
from its start to its exit and its peak RSS from os.wait4. `evolve --resume`
is timed to the first request its LLM client sends to a local server, and
its peak RSS read (VmHWM) at that moment; it is then stopped. Cold: run.db's
pages are dropped from the page cache before each command (sync, then
POSIX_FADV_DONTNEED over the whole file, WAL included).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "kernelevo.cli.app"]
FIRST_REQUEST_TIMEOUT_S = 300
FIGURES = ("resume", "show", "show_json", "runs", "export_best", "report", "ui_run_page")


def evict(run_dir: Path) -> None:
    """Drop the run's database pages from the page cache: what "cold" means here."""
    os.sync()
    for name in ("run.db", "run.db-wal"):
        path = run_dir / name
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def environment() -> dict[str, str]:
    """The child's environment: this checkout's src unless PYTHONPATH names another."""
    src = str(Path(__file__).resolve().parent.parent / "src")
    return dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or src,
                OPENAI_API_KEY="not-a-key", COLUMNS="120")


def timed(arguments: list[str], cwd: Path) -> dict[str, Any]:
    """Wall seconds and peak RSS (MB) of one command run to its end."""
    started = time.perf_counter()
    process = subprocess.Popen(CLI + arguments, cwd=cwd, env=environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.append(process.stdout.read()))
    reader.start()
    _, status, usage = os.wait4(process.pid, 0)
    wall_s = time.perf_counter() - started
    reader.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": round(wall_s, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "exit": process.returncode, "output_bytes": len(output[0]),
            "tail": output[0].decode(errors="replace")[-300:] if process.returncode else ""}


class _FirstRequest(BaseHTTPRequestHandler):
    """Answers every request with a 503 after noting when the first one came."""

    first_at: float | None = None
    arrived = threading.Event()

    def do_POST(self) -> None:  # noqa: N802
        if type(self).first_at is None:
            type(self).first_at = time.perf_counter()
            type(self).arrived.set()
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def resume_until_first_request(run_dir: Path, cache: str) -> dict[str, Any]:
    """`evolve --resume` on a copy of the run, until its first LLM request arrives."""
    handler = type("Handler", (_FirstRequest,), {"first_at": None, "arrived": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    with tempfile.TemporaryDirectory(prefix="scale-resume-", dir=run_dir.parent.parent) as tmp:
        copy = Path(tmp) / run_dir.name
        copy.mkdir()
        for name in ("run.db", "run.db-wal"):
            if (run_dir / name).is_file():
                shutil.copyfile(run_dir / name, copy / name)
        if cache == "cold":
            evict(copy)
        started = time.perf_counter()
        process = subprocess.Popen(
            CLI + ["evolve", "--resume", str(copy), "--base-url", base_url],
            # Its own memory store: the generated run's kernels must not be remembered
            # in the user's (they are synthetic and do not run).
            cwd=tmp, env={**environment(), "KERNELEVO_MEMORY_DB": str(Path(tmp) / "memory.db")},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            arrived = handler.arrived.wait(FIRST_REQUEST_TIMEOUT_S)
            peak_mb, cpu_s = _vm_hwm_mb(process.pid), _cpu_s(process.pid)
            if not arrived or handler.first_at is None:
                return {"wall_s": None, "peak_rss_mb": peak_mb, "exit": process.poll(),
                        "tail": process.stderr.read().decode()[-500:] if process.poll() is not None
                        else "no LLM request in time"}
            return {"wall_s": round(handler.first_at - started, 3), "cpu_s": cpu_s,
                    "peak_rss_mb": peak_mb}
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            server.shutdown()


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system) the process has used so far: apart from the other
    work that shares the machine and stretches wall time."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


def _vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


@contextmanager
def ui_server(runs_dir: Path) -> Iterator[tuple[str, int]]:
    """`kernelevo ui` over `runs_dir` in its own process; yields its URL and pid."""
    process = subprocess.Popen(CLI + ["ui", "--runs-dir", str(runs_dir), "--port", "0"],
                               env=environment(), stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        found = re.search(r"http://[\d.]+:\d+", line)
        if not found:
            raise RuntimeError(f"the UI did not start: {line}{process.stderr.read()}")
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield found.group(), process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def ui_run_page(run_dir: Path, cache: str, repeats: int) -> dict[str, Any]:
    """Seconds from sending GET /run/<id> to its last byte, as the UI server answers it."""
    with ui_server(run_dir.parent) as (url, pid):
        _fetch(url + "/")  # the server's own imports are not the page's cost
        times, cpu = [], []
        for _ in range(repeats):
            if cache == "cold":
                evict(run_dir)
            cpu_before, started = _cpu_s(pid) or 0.0, time.perf_counter()
            size = len(_fetch(f"{url}/run/{run_dir.name}"))
            times.append(time.perf_counter() - started)
            cpu.append((_cpu_s(pid) or 0.0) - cpu_before)
        return {"wall_s": round(statistics.median(times), 3),
                "cpu_s": round(statistics.median(cpu), 2),
                "all_s": [round(t, 3) for t in times], "page_bytes": size,
                "peak_rss_mb": _vm_hwm_mb(pid)}


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=600) as response:
        return response.read()


def commands(run_dir: Path, out: Path) -> dict[str, list[str]]:
    runs = ["--runs-dir", str(run_dir.parent)]
    return {"show": ["show", run_dir.name, *runs],
            "show_json": ["show", run_dir.name, "--json", *runs],
            "runs": ["runs", *runs],
            "export_best": ["export", run_dir.name, "--best", "--no-recheck", "--force",
                            "-o", str(out / "best.py"), *runs],
            "report": ["report", run_dir.name, "--force", "-o", str(out / "report.html"), *runs]}


def measure_all(run_dir: Path, cache: str, repeats: int, only: list[str]) -> dict[str, Any]:
    """Every figure (or those in `only`), the median of `repeats` runs of each command."""
    wanted = only or list(FIGURES)
    figures: dict[str, Any] = {"run": str(run_dir), "cache": cache,
                               "run_db_mb": round((run_dir / "run.db").stat().st_size / 1e6, 1),
                               "code": _code_version()}
    with tempfile.TemporaryDirectory(prefix="scale-out-") as out:
        argv = commands(run_dir, Path(out))
        for name in wanted:
            if name == "ui_run_page":
                figures[name] = ui_run_page(run_dir, cache, repeats)
                continue
            trials = []
            for _ in range(repeats):
                if cache == "cold":
                    evict(run_dir)
                trials.append(resume_until_first_request(run_dir, cache) if name == "resume"
                              else timed(argv[name], Path(out)))
            figures[name] = _median(trials)
            print(name, json.dumps(figures[name]), file=sys.stderr, flush=True)
    return figures


def _median(trials: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [t["wall_s"] for t in trials if t.get("wall_s") is not None]
    chosen = dict(trials[-1])
    chosen["wall_s"] = round(statistics.median(walls), 3) if walls else None
    cpus = [t["cpu_s"] for t in trials if t.get("cpu_s") is not None]
    chosen["cpu_s"] = round(statistics.median(cpus), 3) if cpus else None
    chosen["all_s"] = [t.get("wall_s") for t in trials]
    chosen["peak_rss_mb"] = max((t["peak_rss_mb"] or 0) for t in trials)
    return chosen


def _code_version() -> str:
    src = environment()["PYTHONPATH"]
    result = subprocess.run(["git", "-C", src, "log", "-1", "--format=%h"], capture_output=True,
                            text=True)
    dirty = subprocess.run(["git", "-C", src, "status", "--porcelain", "--", "."],
                           capture_output=True, text=True).stdout.strip()
    return result.stdout.strip() + (" + uncommitted changes" if dirty else "")


