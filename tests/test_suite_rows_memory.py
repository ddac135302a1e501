"""bench/suite_rows.py: what rows' processes held on the GPU, against their lane's size."""

from __future__ import annotations

from kernelevo.suite.footprint import CONTEXT_BYTES
from tests.conftest import bench_module

GIB = 1 << 30
CONTEXTS = 2 * CONTEXT_BYTES  # a row's oracle and worker (the re-check's two: two more)


def _row(task: str, size_gib: float, source: str = "sizes", **peaks_gib: float) -> dict:
    return {"task": task, "lane_bytes": CONTEXTS + int(size_gib * GIB), "lane_bytes_from": source,
            "gpu_peak_bytes": {k: int(v * GIB) for k, v in peaks_gib.items()}}


def test_every_process_s_peak_and_the_contexts_are_set_against_the_lane_s_size():
    rows = [_row("small", 4, oracle=1, worker=1), _row("middle", 4, oracle=2, worker=2),
            _row("conv3d", 2, oracle=3, worker=5, recheck_oracle=2, recheck_worker=2),
            {"task": "cpu", "lane_bytes": 0}, {"task": "untimed", "lane_bytes": GIB}]
    found = bench_module("suite_rows").memory(rows)
    assert found["rows_with_peaks"] == 3 and found["over_the_size"] == 1
    top = found["largest"][0]
    assert top["task"] == "conv3d" and top["from"] == "sizes"
    # its re-check's processes held a context each too
    assert top["ratio"] == round((2 * CONTEXTS + 12 * GIB) / (CONTEXTS + 2 * GIB), 2)
    assert top["peaks_gib"] == {"oracle": 3.0, "worker": 5.0, "recheck_oracle": 2.0,
                                "recheck_worker": 2.0}
    assert top["size_gib"] == round((CONTEXTS + 2 * GIB) / GIB, 2)
    assert found["largest"][-1]["task"] == "small"  # 2 of 4 GiB: the lowest
    assert bench_module("suite_rows").memory([{"task": "cpu"}]) == {"rows_with_peaks": 0}


def test_rows_sized_from_recorded_peaks_are_told_apart_from_those_sized_from_sizes():
    rows = [_row("a", 2, "peaks", oracle=1, worker=1), _row("b", 2, "sizes", oracle=3, worker=3),
            _row("c", 2, "sizes", oracle=1, worker=1)]
    by_source = bench_module("suite_rows").memory(rows)["by_source"]
    assert by_source["peaks"] == {"rows": 1, "held_over_size_p10_p50_p90": [1.0] * 3,
                                  "over_the_size": 0}
    assert by_source["sizes"]["rows"] == 2 and by_source["sizes"]["over_the_size"] == 1
