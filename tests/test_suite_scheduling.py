"""A suite's scheduling decisions, with GPU memory, footprints and clocks given as numbers.

What a lane takes next (quickest first, only where the GPU's free memory
holds it), how many lanes a GPU gets, and the time left the progress lines
print.
"""

import threading
import time
from pathlib import Path

import pytest

from kernelevo.suite.eta import Eta
from kernelevo.suite.footprint import CONTEXT_BYTES, LANE_MIN_BYTES, LANE_PROCESSES, \
    RECHECK_FIT, SESSION_FIT, Footprint, measure_footprint
from kernelevo.suite.schedule import MemoryBook, PlannedTask, TaskQueue, fits, \
    judging_order, lanes_for_memory
from kernelevo.suite.tasks import Solution, SuiteTask
from kernelevo.task import load_task, task_from_source
from tests.conftest import ROOT

GiB = 1 << 30
TASKS = ROOT / "tests" / "fixtures" / "tasks"


def test_a_task_s_footprint_comes_from_its_sizes_on_the_meta_device():
    add = measure_footprint(load_task(str(TASKS / "add.py")))
    # two (64, 1000) float32 inputs, one output of the same shape (the one tensor its
    # forward makes), no parameters
    assert add == Footprint(2 * 64 * 1000 * 4, 64 * 1000 * 4, 0, 64 * 1000 * 4)
    assert measure_footprint(load_task(str(TASKS / "add.py")), "float16") == Footprint(
        2 * 64 * 1000 * 2, 64 * 1000 * 2, 0, 64 * 1000 * 2)  # at the judged precision
    linear = measure_footprint(load_task(str(TASKS / "linear_relu.py")))
    assert linear.input_bytes == 32 * 64 * 4 and linear.output_bytes == 32 * 48 * 4
    assert linear.parameter_bytes == (64 * 48 + 48) * 4
    assert linear.live_bytes >= 2 * 32 * 48 * 4  # the linear's output, and the relu's


def test_a_lane_is_sized_by_the_fit_of_what_its_processes_held():
    add = measure_footprint(load_task(str(TASKS / "add.py")))

    def fitted(fit, copies=1.0):
        return (fit["fixed"] * GiB + copies * (fit["inputs"] * add.input_bytes
                                               + fit["outputs"] * add.output_bytes)
                + fit["live"] * add.live_bytes)

    # a context for each process: the evaluation's oracle and worker, the re-check's two
    contexts = 4 * CONTEXT_BYTES
    one = add.lane_bytes()
    assert one == contexts + int(fitted(SESSION_FIT) + fitted(RECHECK_FIT))
    # a standby session beside the evaluation holds as much again, its two processes'
    # contexts too; no re-check, none of it
    assert add.lane_bytes(sessions=2) == LANE_PROCESSES * CONTEXT_BYTES + int(
        2 * fitted(SESSION_FIT) + fitted(RECHECK_FIT))
    assert add.lane_bytes(recheck=False) == 2 * CONTEXT_BYTES + int(fitted(SESSION_FIT))
    # more input sets than the fit's three: more copies of the inputs and outputs
    assert add.lane_bytes(5) == contexts + int(fitted(SESSION_FIT, 7 / 5)
                                               + fitted(RECHECK_FIT, 7 / 5))
    assert LANE_MIN_BYTES == Footprint(0, 0, 0).lane_bytes() == contexts + int(
        (SESSION_FIT["fixed"] + RECHECK_FIT["fixed"]) * GiB)
    # the largest level-2 convolutions held about 25 GiB a lane (bench/RESULTS.md): sized so
    conv = Footprint(int(0.062 * GiB), int(0.5 * GiB), 0, int(1.0 * GiB))
    assert 20 * GiB < conv.lane_bytes() < 30 * GiB


def test_a_forward_the_meta_device_cannot_run_is_sized_by_its_inputs():
    task = task_from_source(
        "import torch\nimport torch.nn as nn\nn = 4096\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.tensor(x.tolist())\n"  # reads values: no meta run
        "def get_inputs():\n    return [torch.randn(n, n)]\n"
        "def get_init_inputs():\n    return []\n", "reads_values")
    assert measure_footprint(task) == Footprint(4096 * 4096 * 4, 4096 * 4096 * 4, 0, 0)


def planned(name, position, needs_build=False, lane_gib=0):
    task = SuiteTask(name, Path(f"{name}.py"))
    return PlannedTask(task, [Solution(Path(f"{name}_0.py"), 0)], position, needs_build,
                       lane_bytes=lane_gib * GiB)


def test_tasks_come_quickest_first_and_those_with_builds_last_in_the_suite_s_order():
    tasks = [planned("conv_cuda", 0, True, 9), planned("big", 1, lane_gib=30),
             planned("gemm_cuda", 2, True, 4), planned("small", 3, lane_gib=4),
             planned("also_small", 4, lane_gib=4)]
    assert [t.task.key for t in judging_order(tasks)] == [
        "small", "also_small", "big", "conv_cuda", "gemm_cuda"]


@pytest.mark.parametrize("need, free, idle, reserved, expected", [
    (50, 10, 79, 0, True),  # alone on the GPU: always (waiting cannot make room)
    (20, 61, 79, 30, True),  # 18 held of 30 reserved: 12 to come, 49 left for it
    (50, 61, 79, 30, False),
    (49, 61, 79, 30, True),
    (50, 79, 79, 30, False),  # nothing held yet: all 30 still to come, 49 left
    (10, 20, 79, 30, True),  # more held than reserved (an estimate short): free decides
    (30, 20, 79, 30, False),
])
def test_a_task_starts_only_where_it_fits_beside_what_running_lanes_will_take(
        need, free, idle, reserved, expected):
    assert fits(need * GiB, free * GiB, idle * GiB, reserved * GiB) is expected


def test_the_memory_book_reserves_what_each_lane_is_expected_to_take():
    free = [79 * GiB]
    book = MemoryBook(lambda: (free[0], 80 * GiB))
    assert book.total_bytes == 80 * GiB
    first = book.admit(30 * GiB)
    second = book.admit(30 * GiB)
    assert first and second and book.reserved_bytes() == 60 * GiB
    assert book.admit(30 * GiB) is None  # 79 free, 60 still to come
    free[0] = 49 * GiB  # the two lanes now hold 30 of their 60
    assert book.admit(20 * GiB) is None  # 49 free, 30 still to come: 19 left
    assert book.admit(19 * GiB) is not None
    book.release(first)
    book.release(second)
    assert book.reserved_bytes() == 19 * GiB
    assert MemoryBook(lambda: None).admit(1 << 50) is not None  # no GPU to ask: no limit


def test_a_gpu_gets_the_lanes_its_cores_allow_and_its_free_memory_holds():
    assert lanes_for_memory(6, None) == 6
    assert lanes_for_memory(6, 79 * GiB) == 6
    assert lanes_for_memory(6, 15 * GiB) == 15 * GiB // LANE_MIN_BYTES == 4
    assert lanes_for_memory(6, 1 * GiB) == 1  # one lane whatever is free


def test_a_lane_takes_the_first_prepared_task_that_fits():
    entries = [planned("huge", 0, lane_gib=60), planned("small", 1, lane_gib=4),
               planned("mid", 2, lane_gib=10)]
    queue = TaskQueue(entries, lambda entry: None)
    queue.plan()  # prepared in turn, then ordered: small, mid, huge
    room = [12]  # GiB a lane may take now
    admit = (lambda e: 1 if e.lane_bytes <= room[0] * GiB else None)
    taken = [queue.take(admit, False, lambda: False)[0].task.key for _ in range(2)]
    assert taken == ["small", "mid"]
    assert queue.take(admit, False, lambda: False)[0] is None  # huge does not fit: no wait
    room[0] = 80
    entry, admission, waited_s = queue.take(admit, True, lambda: False)
    assert (entry.task.key, admission, waited_s) == ("huge", 1, 0.0)
    assert queue.take(admit, True, lambda: False)[0] is None and queue.left() == 0


def test_a_lane_waiting_for_memory_takes_the_task_once_it_fits():
    queue = TaskQueue([planned("big", 0, lane_gib=40)], lambda entry: None)
    queue.plan()
    room = [10]
    threading.Timer(0.5, lambda: room.__setitem__(0, 50)).start()
    entry, _, waited_s = queue.take(lambda e: 1 if e.lane_bytes <= room[0] * GiB else None,
                                    True, lambda: False)
    assert entry.task.key == "big" and 0.3 < waited_s < 3


def test_a_task_whose_loading_never_ends_holds_up_no_other_task():
    release = threading.Event()

    def prepare(entry):
        if entry.task.key == "loops":
            release.wait(30)  # a task whose top level loops
        entry.loaded = entry.task.key

    queue = TaskQueue([planned("loops", 0), planned("fine", 1)], prepare, limit_s=0.5)
    started = time.monotonic()
    queue.start()
    first, _, _ = queue.take(lambda e: 0, True, lambda: False)
    second, _, _ = queue.take(lambda e: 0, True, lambda: False)
    release.set()
    assert time.monotonic() - started < 5
    assert {first.task.key, second.task.key} == {"loops", "fine"}
    looping = first if first.task.key == "loops" else second
    assert looping.error.startswith("loading the task took more than 0.5 s ([eval] "
                                    "import_timeout_s)")


def simulated_rows(lanes, rows_per_lane, cold_s, row_s):
    """Rows as a suite's lanes finish them: (finished at, row), in order."""
    finished = []
    for lane in range(lanes):
        clock = cold_s + 2 * lane  # the lanes' first rows, cold, a little apart
        finished.append((clock, {"task": f"t{lane}", "lane": lane, "wall_s": clock}))
        for index in range(1, rows_per_lane):
            wall = row_s * (0.7 if index % 2 else 1.3)
            clock += wall
            finished.append((clock, {"task": f"t{lane}", "lane": lane, "wall_s": wall}))
    return sorted(finished, key=lambda item: item[0])


def test_the_time_left_is_estimated_from_rows_past_each_lane_s_start_across_lanes():
    """The H100 case: four lanes' first rows at 50-56 s, 28 rows, the whole run 131 s.
    The old estimate (the pace so far, as if one lane) said 23 min at the first row."""
    timeline = simulated_rows(lanes=4, rows_per_lane=7, cold_s=50, row_s=12.5)
    end = timeline[-1][0]
    eta = Eta({f"t{lane}": 7 for lane in range(4)}, lanes=4)
    said = []
    for clock, row in timeline:
        eta.finished(row)
        said.append((clock, eta.text(), eta.seconds_left()))
    assert [text for _, text, _ in said[:5]] == ["estimating..."] * 5
    assert said[-1][1] == "" and said[-1][2] == 0.0
    for clock, text, seconds in said[5:-1]:
        assert abs(seconds - (end - clock)) <= 0.35 * (end - clock) + 10, (clock, text)
    assert said[6][1].startswith("about ") and said[6][1].endswith(" s left")


def test_the_time_left_counts_a_task_s_rows_on_its_one_lane():
    eta = Eta({"long": 10, "short": 1}, lanes=4)
    for lane in range(2):  # each lane's first row: its start, not its pace
        eta.finished({"task": "long" if lane else "short", "lane": lane, "wall_s": 30.0})
    assert eta.seconds_left() is None
    for _ in range(2):
        eta.finished({"task": "long", "lane": 1, "wall_s": 10.0})
    # 7 rows left, all of one task: one lane judges them, whatever the lanes
    assert eta.seconds_left() == pytest.approx(70.0)
    assert eta.text() == "about 70 s left"
    for _ in range(6):
        eta.finished({"task": "long", "lane": 1, "wall_s": 10.0})
    assert eta.seconds_left() == pytest.approx(10.0) and eta.text() == "about 10 s left"
    eta.finished({"task": "long", "lane": 1, "wall_s": 10.0})
    assert eta.text() == ""  # done
    quick = Eta({"a": 4}, lanes=2)
    for wall_s in (30.0, 2.0, 0.0):  # the last a static check's verdict
        quick.finished({"task": "a", "lane": 0, "wall_s": wall_s})
    assert quick.seconds_left() == pytest.approx(1.0) and quick.text() == "a few seconds left"


def test_the_time_left_is_a_floor_while_tasks_not_started_are_left():
    """Tasks go quickest first: those not started yet are the slower ones, as a rule."""
    eta = Eta({"a": 1, "b": 1, "c": 3, "d": 1}, lanes=2)
    for task, lane in (("a", 0), ("c", 1), ("b", 0), ("c", 1)):
        eta.finished({"task": task, "lane": lane, "wall_s": 40.0})
    assert eta.seconds_left() == pytest.approx(40.0)  # c's last row and d's: 2 rows, 2 lanes
    assert eta.floor() and eta.text() == "at least 40 s left"  # d not started
    eta.finished({"task": "d", "lane": 0, "wall_s": 40.0})
    assert not eta.floor() and eta.text() == "about 40 s left"  # only c's own rows are left
    quick = Eta({"a": 3, "b": 1}, lanes=1)
    for _ in range(3):  # the lane's first row, then two rows of its pace
        quick.finished({"task": "a", "lane": 0, "wall_s": 1.0})
    assert quick.text() == "at least a few seconds left"
