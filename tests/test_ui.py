"""The web UI over HTTP: pages, the polling endpoint and errors, from real stored runs."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from kernelevo.report import make_server
from tests.test_report import TIMED_RUN_ID, make_runs, text_of


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    return make_runs(tmp_path_factory.getbasetemp() / "report-runs")


@contextmanager
def serving(runs_dir: Path) -> Iterator[str]:
    """The UI over `runs_dir` on an ephemeral port, in a thread; yields its base URL."""
    server = make_server(runs_dir, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def base_url(runs) -> Iterator[str]:
    with serving(runs["dir"]) as url:
        yield url


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_list_page_links_every_run(base_url, runs):
    status, content_type, page = get(base_url + "/")
    assert status == 200 and content_type.startswith("text/html")
    for run_id in (runs["cpu"].name, TIMED_RUN_ID):
        assert f'href="/run/{quote(run_id)}"' in page
    assert "best-so-far speedup vs eager against tokens" in page and "<polyline" in page


def test_run_page_shows_the_views_and_polls(base_url, runs):
    status, _, page = get(f"{base_url}/run/{TIMED_RUN_ID}")
    assert status == 200
    assert page.count('class="plot"') >= 4 and "<polyline" in page
    assert f'href="/run/{TIMED_RUN_ID}/candidate/c0005"' in page
    assert f"/api/run/{TIMED_RUN_ID}/summary" in page and "setTimeout" in page


def test_cpu_run_page_renders_without_timings(base_url, runs):
    status, _, page = get(f"{base_url}/run/{runs['cpu'].name}")
    assert status == 200 and "Judged without a GPU" in page and "nothing was timed" in page


def test_candidate_page_shows_code_prompt_and_answer(base_url):
    status, _, page = get(f"{base_url}/run/{TIMED_RUN_ID}/candidate/c0004")
    assert status == 200
    code = page[page.index('id="code"'):]
    assert "class ModelNew" in text_of(code[:code.index("</pre>")])
    assert "Improve candidate c0003 (repair)." in page  # the prompt
    assert "# one launch" in page and "llm-repair" in page  # the answer and the name
    assert "1,500 in, 900 out" in page and "$0.0180" in page
    assert "--- c0003" in page  # the diff to its parent
    assert "passed" in page and "0.0400 ms" in page  # the verdict and its IQR


def test_candidate_page_of_a_failure_shows_its_logs(base_url):
    status, _, page = get(f"{base_url}/run/{TIMED_RUN_ID}/candidate/c0003")
    assert status == 200 and "compile_failed" in page
    assert "name &#39;z&#39; is not defined" in page


def test_tuner_candidate_page_says_it_cost_no_tokens(base_url, runs):
    status, _, page = get(f"{base_url}/run/{runs['cpu'].name}/candidate/c0003")
    assert status == 200 and "costs no tokens" in page and "ModelNew" in page


def test_summary_json(base_url):
    status, content_type, body = get(f"{base_url}/api/run/{TIMED_RUN_ID}/summary")
    summary = json.loads(body)
    assert status == 200 and content_type == "application/json"
    assert summary["status"] == "finished" and summary["best_id"] == "c0005"
    assert summary["best_speedup_vs_eager"] == pytest.approx(2.5)
    assert summary["best_speedup_vs_compile"] == pytest.approx(1.875)  # c0005's own
    assert summary["baseline_id"] == "c0001" and summary["no_best"] is None
    assert summary["tokens"] == 4400 and summary["candidates"] == 6
    assert summary["by_status"] == {"compile_error": 1, "ok": 4, "unevaluated": 1}
    assert summary["text"]["best"] == "2.50x" and summary["version"]


def test_comparison_page(base_url, runs):
    status, _, page = get(f"{base_url}/compare?runs={runs['cpu'].name},{TIMED_RUN_ID}")
    assert status == 200 and runs["cpu"].name in page and TIMED_RUN_ID in page
    status, _, same = get(f"{base_url}/compare?runs={runs['cpu'].name}&runs={TIMED_RUN_ID}")
    assert status == 200 and TIMED_RUN_ID in same


@pytest.mark.parametrize("path", [
    "/run/no-such-run", "/run/..%2F..", "/api/run/no-such-run/summary",
    f"/run/{TIMED_RUN_ID}/candidate/c9999", "/compare", "/compare?runs=no-such-run",
    "/nowhere",
])
def test_unknown_pages_are_404(base_url, path):
    status, content_type, page = get(base_url + path)
    assert status == 404 and content_type.startswith("text/html")
    assert "404" in page
