"""The web UI in a real headless Chromium: a run page loads, plots draw, candidates open.

Needs Playwright (the Python package) and Debian's chromium at /usr/bin/chromium;
Playwright's own browser download is not used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api")

from kernelevo.candidate import Candidate  # noqa: E402
from kernelevo.store.run_store import RunStore  # noqa: E402
from tests.test_report import TIMED_RUN_ID, make_runs  # noqa: E402
from tests.test_ui import serving  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 30_000

pytestmark = pytest.mark.skipif(not CHROMIUM.is_file(),
                                reason="needs Debian's chromium at /usr/bin/chromium")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    return make_runs(tmp_path_factory.getbasetemp() / "report-runs")


@pytest.fixture(scope="module")
def base_url(runs) -> Iterator[str]:
    with serving(runs["dir"]) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert errors == [], f"script errors on the page: {errors}"


def test_run_page_plots_and_candidate_page(page, base_url, tmp_path):
    page.goto(f"{base_url}/run/{TIMED_RUN_ID}")
    page.wait_for_selector("svg.plot")
    plots = page.locator("svg.plot")
    assert plots.count() == 4
    step_line = page.locator("svg.plot polyline").first.get_attribute("points")
    assert len(step_line.split()) >= 5  # three kernels' steps; the PyTorch baseline is none
    box = plots.first.bounding_box()
    assert box is not None and box["width"] > 200 and box["height"] > 80
    assert page.locator("svg.cells").count() == 2
    # The live script polled the summary endpoint once the page loaded.
    page.wait_for_selector("html[data-polled]")

    page.locator("#best h2 a", has_text="c0005").click()
    page.wait_for_url(f"**/run/{TIMED_RUN_ID}/candidate/c0005")
    code = page.locator("#code pre.code").inner_text()
    assert "ModelNew" in code and "BLOCK=2048" in code
    screenshot = page.screenshot(path=str(tmp_path / "candidate.png"), full_page=True)
    saved = tmp_path / "candidate.png"
    assert saved.is_file() and saved.stat().st_size > 10_000 and screenshot[:4] == b"\x89PNG"


def test_live_page_swaps_in_new_candidates(page, tmp_path):
    """A candidate added while the page is open appears without a reload."""
    run_id = "20260101-000001-add-live"
    with RunStore.create(tmp_path, "add", "# task", {"search": {"islands": 1}},
                         run_id=run_id) as store:
        store.add_candidate(Candidate("class ModelNew: pass\n", "pytorch", "first", "seed"))
    with serving(tmp_path) as base_url:
        page.goto(f"{base_url}/run/{run_id}")
        page.wait_for_selector("html[data-polled]")
        assert page.locator("#candidates", has_text="second").count() == 0
        with RunStore.open(tmp_path / run_id) as store:
            store.add_candidate(Candidate("class ModelNew: pass  # 2\n", "pytorch", "second",
                                          "llm"))
        page.locator("#candidates", has_text="second").wait_for(timeout=10_000)
        assert page.locator("[data-live=candidates]").inner_text() == "2"
