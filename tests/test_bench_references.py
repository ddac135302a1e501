"""bench/ as a reader finds it: every file the repository cites is there, every script
and raw result is cited by bench/RESULTS.md."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

BENCH = ROOT / "bench"
RESULTS = BENCH / "RESULTS.md"
# A file under bench (it has a suffix) or a folder written with its slash; a path
# with neither is a folder a command is told to write (--out), made when it runs.
# Placeholders (RUN, $OUT, <date>) end a path early.
_CITED = re.compile(r"\bbench/[a-z0-9_.\-/]*[a-z0-9_/]")


def _citing_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / ".ci" / "run"]
    files += sorted((ROOT / "docs").glob("*.md"))
    files += sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "tests").glob("*.py"))
    files += [path for path in sorted(BENCH.rglob("*"))
              if path.suffix in (".py", ".sh", ".md", ".toml") and "candidates" not in path.parts]
    return [path for path in files if path.is_file() and path != Path(__file__).resolve()]


def test_every_bench_path_the_repository_cites_exists():
    missing = set()
    for path in _citing_files():
        for cited in _CITED.findall(path.read_text(errors="replace")):
            if (cited.endswith("/") or Path(cited).suffix) and not (ROOT / cited).exists():
                missing.add(f"{path.relative_to(ROOT)}: {cited}")
    assert not missing, sorted(missing)


def test_every_raw_result_results_md_cites_exists_and_every_one_kept_is_cited():
    text = RESULTS.read_text()
    cited = set(re.findall(r"`results/([a-z0-9_.\-/]+)", text))
    missing = sorted(name for name in cited if not (BENCH / "results" / name).exists())
    assert not missing, f"cited by bench/RESULTS.md, not in bench/results: {missing}"
    folders = sorted(path.name for path in (BENCH / "results").iterdir() if path.is_dir())
    uncited = [name for name in folders if f"results/{name}/" not in text]
    assert not uncited, f"raw results no section of bench/RESULTS.md cites: {uncited}"


def test_every_bench_script_is_in_results_md():
    text = RESULTS.read_text()
    scripts = sorted(path.name for path in BENCH.glob("*") if path.suffix in (".py", ".sh"))
    unlisted = [name for name in scripts if f"`{name}`" not in text and f"bench/{name}" not in text]
    assert not unlisted, f"give each a section (or list it as a helper) in bench/RESULTS.md: {unlisted}"
