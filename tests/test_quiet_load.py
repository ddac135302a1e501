"""What still runs while a timing's calls run with the other jobs stood still
(evaluate/sandbox/quiet_load.py), and how a suite and the agreement bench say it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelevo.evaluate.parent.session import Session
from kernelevo.evaluate.sandbox import quiet, quiet_load
from kernelevo.evaluate.sandbox.quiet_load import QuietLoad, read
from kernelevo.evaluate.shared.cores import TIMING_CORES_ENV
from kernelevo.suite.time_spent import LaneRecord, time_lines, time_spent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import speed_agreement  # noqa: E402

linux = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="no /proc/stat")

# user nice system idle iowait irq softirq steal
STAT = """cpu  900 0 300 5000 0 10 10 40 0 0
cpu0 100 0 50 2000 0 5 5 0 0 0
cpu1 300 0 100 1000 0 0 0 30 0 0
cpu2 500 0 150 2000 0 5 5 10 0 0

intr 12345
"""


def test_a_reading_counts_busy_time_off_the_kept_cores_and_steal_on_them(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    ticks = quiet_load._clock_ticks()
    kept = read({1}, str(stat))
    assert kept is not None
    # cpu0 and cpu2: user + nice + system + irq + softirq; cpu1's steal alone
    assert kept.busy_elsewhere == pytest.approx((160 + 660) / ticks)
    assert kept.steal_kept == pytest.approx(30 / ticks)
    none_kept = read(set(), str(stat))
    assert none_kept is not None
    assert none_kept.busy_elsewhere == pytest.approx((160 + 400 + 660) / ticks)
    assert none_kept.steal_kept == 0
    assert read(set(), str(tmp_path / "missing")) is None  # another OS: nothing measured


def test_the_kept_cores_come_from_what_the_judge_names_to_its_children():
    assert QuietLoad.for_children({TIMING_CORES_ENV: "3"}).kept >= {3}
    assert QuietLoad.for_children({}).kept == set()


@linux
def test_a_quiet_measures_the_judges_own_busy_thread_and_nothing_outside_its_quiets():
    load = QuietLoad()
    load.end()  # nothing open: nothing added
    assert load.phases() == {}
    load.start()
    started = time.process_time()
    while time.process_time() - started < 0.3:  # the judge's own process, busy on a core
        pass
    load.start()  # asked again while open: the same quiet
    load.end()
    time.sleep(0.2)  # the others going on: not counted
    phases = load.phases()
    assert 0.3 <= phases["quiet"] < 2.0  # a loaded machine stretches the wall time
    assert phases["quiet_judge_cpu"] >= 0.28
    # every core counts where none is kept, this busy one among them (10 ms ticks)
    assert phases["quiet_busy_elsewhere"] >= phases["quiet_judge_cpu"] - 0.03
    assert phases["quiet_steal"] == 0.0  # no core kept: none to count steal on


@linux
def test_the_session_measures_a_granted_quiet_until_the_hold_stops_being_exclusive(monkeypatch):
    monkeypatch.setattr(quiet, "hold_others", lambda pid: 2)
    monkeypatch.setattr(quiet, "release", lambda pid: 0.0)
    timing: list[tuple[int, bool]] = []
    monkeypatch.setattr(quiet, "timing", lambda pid, on: timing.append((pid, on)))
    session = SimpleNamespace(deadline=SimpleNamespace(pid=77), hold=SimpleNamespace(state="exclusive"),
                              _quiet_load=QuietLoad())
    Session._host_quiet(session, True)
    time.sleep(0.1)
    Session._alone(session, False)  # the hold went back to shared: the quiet is over
    measured = session._quiet_load.seconds
    assert 0.1 <= measured < 1.0
    assert timing == [(77, False)]
    time.sleep(0.1)
    Session._host_quiet(session, False)  # the worker's own release after: nothing open
    assert session._quiet_load.seconds == measured


def test_a_suite_says_how_busy_the_machine_was_while_its_calls_were_timed():
    rows = [{"task": "a", "sample": 0, "wall_s": 5.0,
             "phases_s": {"quiet": 0.5, "quiet_busy_elsewhere": 0.75, "quiet_judge_cpu": 0.25,
                          "quiet_steal": 0.01, "timing": 1.0}},
            {"task": "b", "sample": 0, "wall_s": 5.0,
             "phases_s": {"quiet": 1.5, "quiet_busy_elsewhere": 1.25, "quiet_judge_cpu": 0.25,
                          "quiet_steal": 0.0, "timing": 2.0}},
            {"task": "c", "sample": 0, "wall_s": 1.0, "phases_s": {"build": 1.0}}]
    spent = time_spent(rows, LaneRecord(), 10.0)
    assert spent["quiet"] == {"seconds": 2.0, "busy_cores_elsewhere": 1.0, "judge_cores": 0.25,
                              "steal_s": 0.01}
    assert any("1.00 cores busy on average off the timing cores, 0.25 of them the judge's"
               in line for line in time_lines(spent))
    assert time_spent(rows[2:], LaneRecord(), 1.0)["quiet"] is None


def test_the_agreement_table_reads_the_quiet_of_each_row():
    found = speed_agreement.quiet_cores({"quiet": 0.5, "quiet_busy_elsewhere": 1.0,
                                         "quiet_judge_cpu": 0.25, "quiet_steal": 0.02})
    assert found == {"quiet_busy_cores": 2.0, "quiet_judge_cores": 0.5, "quiet_steal_s": 0.02}
    assert speed_agreement.quiet_cores({"timing": 1.0}) == {}


def test_the_rows_say_how_busy_the_machine_was_beside_their_host_probes():
    import suite_rows

    rows = [{"host_probe_us": "110", "phases_s": {"quiet": 0.5, "quiet_busy_elsewhere": 0.05,
                                                   "quiet_judge_cpu": 0.0, "quiet_steal": 0.0}},
            {"host_probe_us": "210", "phases_s": {"quiet": 0.25, "quiet_busy_elsewhere": 0.25,
                                                   "quiet_judge_cpu": 0.1, "quiet_steal": 0.02}},
            {"phases_s": {"timing": 1.0}}]  # timed without a quiet (on the CPU): left out
    found = suite_rows.quiet(rows)
    assert found["rows"] == 2 and found["seconds"] == 0.75
    assert found["busy_cores_p10_p50_p90"] == [0.1, 0.1, 0.1]  # the lower of two, as the rest
    assert found["busy_cores_max"] == 1.0
    assert found["steal_s"] == 0.02
    assert found["host_probe_us_p10_p50_p90"] == [110.0, 110.0, 110.0]
    assert suite_rows.quiet(rows[2:]) == {"rows": 0}
