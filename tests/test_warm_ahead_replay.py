"""bench/warm_ahead_replay.py: which rows find their task taken ahead, by the suite's rule."""

from __future__ import annotations

from tests.conftest import bench_module

GIB = 1 << 30


def _row(name, seconds, size_gib, warm=False):
    return bench_module("warm_ahead_replay").Row(name, seconds, size_gib, False, warm)


def test_a_lane_takes_its_next_task_ahead_only_where_it_fits_beside_every_reservation():
    replay = bench_module("warm_ahead_replay").replay
    rows = [_row(n, seconds, 4.0) for n, seconds in zip("abcd", (10.0, 12.0, 10.0, 12.0))]
    # one lane: its current task and the next fit together, so every row after the first is warm
    assert replay(rows, lanes=1, gpu_gib=10.0, head_start_s=0.0)["warm_ahead"] == 3
    # two lanes of 4 GiB each on 10 GiB: a third reservation never fits beside two, so none
    # is warm
    found = replay(rows, lanes=2, gpu_gib=10.0, head_start_s=0.0)
    assert (found["warm_ahead"], found["cold"]) == (0, 4)
    # with room for three: lane 1 takes c ahead beside a and b (lane 0, starting first,
    # took nothing ahead while lane 1 had no task), and lane 0 then takes d itself
    assert replay(rows, lanes=2, gpu_gib=12.0, head_start_s=0.0)["warm_ahead"] == 1


def test_no_lane_takes_ahead_while_another_waits_for_a_task():
    replay = bench_module("warm_ahead_replay").replay
    # lane 1 waits for the first row (the head start) while lane 0 judges it: lane 0 takes
    # nothing ahead then, nor as it starts its second row before lane 1 has its first; lane
    # 1, starting last, takes the last task ahead
    rows = [_row(n, 2.0, 1.0) for n in "abcd"]
    found = replay(rows, lanes=2, gpu_gib=100.0, head_start_s=5.0)
    assert (found["warm_ahead"], found["cold"]) == (1, 3)
    # a lane waiting for memory (a big task that fits only alone) keeps the others from
    # taking ahead, and its wait is counted
    rows = [_row("small", 4.0, 2.0), _row("next", 6.0, 2.0), _row("big", 1.0, 9.0)]
    found = replay(rows, lanes=2, gpu_gib=10.0, head_start_s=0.0)
    # lane 0 waits for "big" from 4 s until lane 1's row ends at 6 s
    assert found["memory_wait_lane_s"] == 2.0 and found["warm_ahead"] == 0


def test_rows_are_sized_as_run_or_with_a_context_for_each_process():
    module = bench_module("warm_ahead_replay")
    from kernelevo.suite.footprint import CONTEXT_BYTES

    results = [{"task": "t", "sample": 0, "wall_s": 3.0, "lane_bytes": 10 * GIB,
                "file": "t__honest.py", "phases_s": {"worker_start": 0.0},
                "gpu_peak_bytes": {"oracle": GIB, "worker": GIB, "recheck_worker": GIB}},
               {"task": "u", "sample": 0, "wall_s": 3.0, "lane_bytes": 8 * GIB,
                "file": "cuda_u__honest.py", "phases_s": {"worker_start": 4.0},
                "gpu_peak_bytes": {"oracle": GIB, "worker": GIB}}]
    as_run = module.rows_of(results, "as_run")
    assert [(r.name, r.size, r.needs_build, r.warm) for r in as_run] == [
        ("t#0", 10.0, False, True), ("u#0", 8.0, True, False)]  # builds last, whatever the size
    now = {r.name: r.size for r in module.rows_of(results, "now")}
    assert now["t#0"] == (10 * GIB - 2 * CONTEXT_BYTES) / GIB  # four processes, not six
    assert now["u#0"] == (8 * GIB - 4 * CONTEXT_BYTES) / GIB  # no re-check: two
    # a row that says how many contexts its size counted is taken at its word
    results[1]["lane_processes"] = 2
    assert {r.name: r.size for r in module.rows_of(results, "now")}["u#0"] == 8.0
