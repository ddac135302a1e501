"""Screenshots of the web UI and the HTML report of a stored run, for the README.

    python bench/ui_screenshots.py RUNS_DIR RUN_ID OUT_DIR

Needs Debian's Chromium at /usr/bin/chromium and the playwright package.
"""

import sys
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

from kernelevo.report import make_server, write_report
from kernelevo.store.run_store import RunStore

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    runs_dir, run_id, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    report = write_report(runs_dir / run_id, out / "report.html")
    server = make_server(runs_dir, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/run/{run_id}")
        page.wait_for_selector("svg")
        page.screenshot(path=str(out / "ui-run.png"), full_page=True)
        with RunStore.read(runs_dir / run_id) as store:  # read-only: run.db stays as it is
            best = store.best()
        if best is not None:  # the best candidate's page: it has a lineage and a verdict
            page.goto(f"{base}/run/{run_id}/candidate/{best.id}")
        else:
            page.locator("a[href*='/candidate/']").first.click()
        page.wait_for_selector("pre")
        page.screenshot(path=str(out / "ui-candidate.png"), full_page=True)
        page.goto(report.resolve().as_uri())
        page.screenshot(path=str(out / "report.png"), full_page=True)
        browser.close()
    server.shutdown()
    print("wrote", *sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    main()
