"""A run killed with SIGKILL at several points resumes and loses nothing."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelevo.store.run_store import RunStore
from kernelevo.store.listing import list_runs
from tests.conftest import ROOT

TASK = ROOT / "tests/fixtures/tasks/add.py"
SEED = ROOT / "tests/fixtures/candidates/honest_add.py"


def _evolve(runs: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "kernelevo.cli.app", "evolve", *extra,
                             "--runs-dir", str(runs)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _verdicts(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT candidate_id, verdict_json FROM verdict").fetchall()
    return dict(rows)


def _verdicts_so_far(db: Path) -> dict[str, str]:
    """Verdicts of a run that may not have created its tables yet."""
    try:
        return _verdicts(db)
    except sqlite3.OperationalError:  # the file exists before its schema does
        return {}


def _wait_for_verdicts(runs: Path, count: int, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dbs = list(runs.glob("*/run.db"))
        if dbs and len(_verdicts_so_far(dbs[0])) >= count:
            return dbs[0]
        time.sleep(0.2)
    raise AssertionError(f"no {count} verdicts within {timeout_s} s")


@pytest.mark.slow
@pytest.mark.parametrize("kill_after_verdicts", [1, 3])
def test_sigkill_then_resume_loses_no_verdict(tmp_path, kill_after_verdicts):
    runs = tmp_path / "runs"
    process = _evolve(runs, str(TASK), "--seed", str(SEED), "--candidates", "6")
    db = _wait_for_verdicts(runs, kill_after_verdicts, 240)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = _verdicts(db)
    assert len(before) >= kill_after_verdicts
    run_id = db.parent.name
    resumed = _evolve(runs, "--resume", run_id)
    _, errors = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, errors[-3000:]
    after = _verdicts(db)
    # Every verdict recorded before the kill is still there, unchanged.
    assert {k: after[k] for k in before} == before
    store = RunStore.open(db)
    candidates = store.candidates()
    assert all(c.verdict is not None for c in candidates), "resume left candidates unjudged"
    assert all(c.evaluation_attempts <= 2 for c in candidates)
    produced = [c for c in candidates if c.candidate.origin != "seed"]
    assert len(produced) <= 6, "the candidate budget was overrun across the kill"
    assert store.run_info().status == "finished"
    assert [r.run_id for r in list_runs(runs)] == [run_id]
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
