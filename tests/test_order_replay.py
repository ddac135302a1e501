"""bench/order_replay.py: a pass's tasks laid out again on lanes that share a GPU's memory."""

from __future__ import annotations

from tests.conftest import bench_module


def test_tasks_are_laid_out_on_free_lanes_only_where_their_sizes_fit():
    replay = bench_module("order_replay")
    # two lanes, 10 GiB: the two 6 GiB tasks cannot run together
    tasks = [("a", 5.0, 6.0, False), ("b", 5.0, 6.0, False), ("c", 1.0, 1.0, False)]
    assert replay.lay_out(tasks, lanes=2, gpu_gib=10.0) == 10.0  # a with c, then b
    assert replay.lay_out(tasks, lanes=2, gpu_gib=12.0) == 6.0  # a with b, then c
    # a task larger than the GPU still runs, alone
    assert replay.lay_out([("huge", 2.0, 50.0, False), ("d", 1.0, 1.0, False)], 2, 10.0) == 3.0


def test_each_order_keeps_the_built_tasks_last_but_the_bound():
    orders = bench_module("order_replay").orders(lanes=1)
    tasks = [("big", 9.0, 8.0, False), ("cuda", 1.0, 1.0, True), ("small", 2.0, 1.0, False),
             ("middle", 3.0, 4.0, False)]
    names = {name: [t[0] for t in order(tasks)] for name, order in orders.items()}
    assert names["the suite's (smallest first)"] == ["small", "middle", "big", "cuda"]
    assert names["largest first"] == ["big", "middle", "small", "cuda"]
    assert names["the lanes' first tasks smallest, then largest first"] == \
        ["small", "big", "middle", "cuda"]
    assert names["longest first (the rows' own times: a bound)"][0] == "big"
