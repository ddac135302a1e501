"""A screenshot of a run's archive grid, as its HTML report shows it.

    python bench/scale_screenshot.py RUN_DIR OUT.png

Writes the run's report to a temporary file and shots its "Archive" section
in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) at
1400 px wide. PYTHONPATH picks the KernelEvo drawn (this checkout's src
otherwise), so the same run can be shot before and after a change.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent / "src"))

from playwright.sync_api import sync_playwright  # noqa: E402

from kernelevo.report import write_report  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    run_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scale-shot-") as folder:
        report = write_report(run_dir, Path(folder) / "report.html")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(report.resolve().as_uri(), timeout=300_000)
            page.locator("#archive").screenshot(path=str(out))
            browser.close()
    print("wrote", out)


if __name__ == "__main__":
    main()
