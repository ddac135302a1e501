"""Reading a stored run never writes to it: older, damaged and read-only run folders."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernelevo
from kernelevo.candidate import Candidate
from kernelevo.cli.app import app
from kernelevo.errors import DamagedStore, StoreError
from kernelevo.evaluate.verdict import TimingStats, verdict_for
from kernelevo.report.server import route
from kernelevo.run.setup import open_to_resume
from kernelevo.store.run_store import RunStore
from kernelevo.store.tables import INDEXES, SCHEMA_VERSION

TASK = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n" \
       "        return x * 2\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n" \
       "def get_init_inputs():\n    return []\n"
KERNEL = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
         "        return x + x\n"
RUN_ID = "20261130-050454-double-1a2b"


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def said(done) -> str:
    return " ".join(done.output.split())


def timed(eager: float) -> object:
    stats = TimingStats(median_ms=0.1, iqr_ms=0.001, min_ms=0.1, samples=20)
    return verdict_for("passed", speedup_vs_eager=eager, speedup_vs_compile=eager / 2,
                       timings={"candidate": stats, "eager": TimingStats(0.2, 0.01, 0.2, 20)})


def make_run(runs: Path) -> Path:
    """A finished run: the PyTorch seed, two passing kernels, a failure, spend."""
    with RunStore.create(runs, "double", TASK, {"search": {"islands": 2}}, run_id=RUN_ID) as store:
        seed = store.add_candidate(Candidate(KERNEL + "# seed\n", "pytorch", origin="seed"))
        fast = store.add_candidate(Candidate(KERNEL, "triton", origin="llm", parent_ids=(seed,)))
        slow = store.add_candidate(Candidate(KERNEL + "# 2\n", "triton", origin="llm"))
        broken = store.add_candidate(Candidate("x = (", "triton", origin="llm"))
        for candidate_id, verdict in ((seed, timed(1.0)), (fast, timed(2.5)), (slow, timed(1.5)),
                                      (broken, verdict_for("compile_failed", "bad syntax"))):
            store.mark_evaluating(candidate_id)
            store.record_verdict(candidate_id, verdict)
        call = store.start_llm_call("tiny", {"messages": []})
        store.finish_llm_call(call, "reply", 1000, 200, 0.01, 1.0, candidate_id=fast)
        store.set_status("finished")
    return runs / RUN_ID


def make_older(run_dir: Path) -> None:
    """Make the store what a version 1 KernelEvo left: no tallies, steps or new indexes."""
    raw = sqlite3.connect(run_dir / "run.db")
    for (trigger,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                                  ).fetchall():
        raw.execute(f"DROP TRIGGER {trigger}")
    for table in ("llm_call_tally", "candidate_tally", "best_step"):
        raw.execute(f"DROP TABLE {table}")
    for index in INDEXES:
        raw.execute(f"DROP INDEX {index}")
    raw.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    assert sorted(path.name for path in run_dir.iterdir()) == ["run.db"]


def fingerprint(run_dir: Path) -> tuple[str, int, list[str]]:
    """The database's bytes and mtime, and what the folder holds."""
    database = run_dir / "run.db"
    return (hashlib.sha256(database.read_bytes()).hexdigest(), database.stat().st_mtime_ns,
            sorted(path.name for path in run_dir.iterdir()))


@pytest.fixture
def older_run(tmp_path: Path) -> Path:
    run_dir = make_run(tmp_path / "runs")
    make_older(run_dir)
    return run_dir


def test_every_reader_leaves_an_older_run_byte_for_byte_as_it_was(older_run, tmp_path):
    runs = older_run.parent
    before = fingerprint(older_run)
    listed = cli("runs", "--runs-dir", str(runs))
    assert listed.exit_code == 0 and RUN_ID in listed.output and "2.50x" in listed.output
    shown = cli("show", "double", "--runs-dir", str(runs))
    assert shown.exit_code == 0 and "best c0002" in said(shown), shown.output
    as_json = cli("show", "--json", RUN_ID, "--runs-dir", str(runs))
    assert as_json.exit_code == 0, as_json.output
    assert cli("runs", "--json", "--runs-dir", str(runs)).exit_code == 0
    report = cli("report", str(older_run), "-o", str(tmp_path / "report.html"))
    assert report.exit_code == 0 and "c0002" in (tmp_path / "report.html").read_text()
    exported = cli("export", RUN_ID, "--best", "--no-recheck", "-o", str(tmp_path / "best.py"),
                   "--runs-dir", str(runs))
    assert exported.exit_code == 0 and "return x + x" in (tmp_path / "best.py").read_text()
    assert kernelevo.export(older_run, tmp_path / "api.py", recheck=False).verdict is None
    for page in ("/", f"/run/{RUN_ID}", f"/run/{RUN_ID}/candidate/c0002",
                 f"/api/run/{RUN_ID}/summary"):
        assert route(runs, page, {}).status == 200
    assert fingerprint(older_run) == before

    # What the reader filled in for the missing totals and steps is what a migration keeps.
    migrated = tmp_path / "migrated"
    shutil.copytree(runs, migrated)
    assert cli("migrate", RUN_ID, "--runs-dir", str(migrated)).exit_code == 0
    again = cli("show", "--json", RUN_ID, "--runs-dir", str(migrated))
    assert json.loads(again.output) == json.loads(as_json.output)
    summary = json.loads(route(migrated, f"/api/run/{RUN_ID}/summary", {}).body)
    assert summary == json.loads(route(runs, f"/api/run/{RUN_ID}/summary", {}).body)


def damage_empty(database: Path) -> None:
    database.write_bytes(b"")


def damage_dropped_verdicts(database: Path) -> None:
    raw = sqlite3.connect(database)
    raw.execute("DROP TABLE verdict")
    raw.commit()
    raw.close()


def damage_not_sqlite(database: Path) -> None:
    database.write_bytes(b"this is a text file, not a database\n" * 200)


def damage_lost_column(database: Path) -> None:
    raw = sqlite3.connect(database)
    raw.execute("ALTER TABLE candidate DROP COLUMN evaluation_attempts")
    raw.commit()
    raw.close()


@pytest.mark.parametrize("damage, words", [
    (damage_empty, "it is empty (0 bytes)"),
    (damage_dropped_verdicts, "its table(s) verdict are missing"),
    (damage_not_sqlite, "it is not an SQLite database"),
    (damage_lost_column, "its table candidate lacks the column(s) evaluation_attempts"),
])
def test_a_damaged_run_database_is_named_damaged_and_left_as_it_is(tmp_path, damage, words):
    run_dir = make_run(tmp_path / "runs")
    database = run_dir / "run.db"
    damage(database)
    before = fingerprint(run_dir)
    shown = cli("show", RUN_ID, "--runs-dir", str(run_dir.parent))
    assert shown.exit_code == 2 and "Traceback" not in shown.output, shown.output
    assert f"{database} is damaged: {words}" in said(shown)
    assert "not judged yet" not in shown.output
    listed = cli("runs", "--runs-dir", str(run_dir.parent))
    assert "unreadable" in listed.output and "damaged" in listed.output
    with pytest.raises(DamagedStore, match="is damaged"):  # a writer (resume) refuses it too
        open_to_resume(run_dir.parent, RUN_ID)
    assert fingerprint(run_dir) == before


def test_a_read_only_run_folder_is_shown_without_a_write(older_run):
    before = fingerprint(older_run)
    modes = {path: path.stat().st_mode for path in (older_run, older_run / "run.db")}
    for path in modes:
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)
    try:
        if os.geteuid() != 0:  # root writes through any mode: there only the bytes prove it
            with pytest.raises(PermissionError):
                (older_run / "probe").write_text("x")
        shown = cli("show", str(older_run))
        assert shown.exit_code == 0 and "best c0002" in said(shown), shown.output
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    assert fingerprint(older_run) == before


def test_a_reader_sees_a_live_run_written_beside_it_and_cannot_write(tmp_path):
    with RunStore.create(tmp_path, "double", TASK, {}, run_id="live") as writer:
        writer.add_candidate(Candidate(KERNEL, "triton", origin="llm"))
        assert (tmp_path / "live" / "run.db-wal").stat().st_size > 0
        with RunStore.read(tmp_path / "live") as reader:
            assert [stored.id for stored in reader.candidates()] == ["c0001"]
            writer.add_candidate(Candidate(KERNEL + "# 2\n", "triton", origin="llm"))
            assert len(reader.candidates()) == 2  # a log with frames is read through
            with pytest.raises(StoreError, match="opened for reading only"):
                reader.set_status("finished")


def test_resume_migrates_an_older_run_and_later_reads_need_no_stand_ins(older_run):
    store, task, _ = open_to_resume(older_run.parent, RUN_ID)
    with store:
        assert "running totals" in " ".join(store.upgraded) and task.name == "double"
    raw = sqlite3.connect(older_run / "run.db")
    names = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    version = raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    raw.close()
    assert set(INDEXES) | {"best_step", "candidate_tally"} <= names
    assert version == str(SCHEMA_VERSION)
    again = cli("migrate", RUN_ID, "--runs-dir", str(older_run.parent))
    assert again.exit_code == 0 and "up to date" in said(again)
