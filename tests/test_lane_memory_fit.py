"""bench/lane_memory_fit.py: the fit of what rows' processes held, and the passes replayed."""

from __future__ import annotations

from tests.conftest import bench_module

GIB = float(1 << 30)


def _terms(inputs=0.0, outputs=0.0, live=0.0, parameters=0.0) -> dict[str, float]:
    return {"fixed": 1.0, "inputs": inputs, "outputs": outputs, "live": live,
            "parameters": parameters}


def test_the_fit_recovers_a_linear_rule_over_the_rows_that_recorded_the_part():
    fit = bench_module("lane_memory_fit")
    terms, rows = [], []
    for inputs, outputs, live, parameters in [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0),
                                              (0, 0, 0, 1), (1, 1, 1, 1), (2, 1, 0, 3)]:
        terms.append(_terms(inputs, outputs, live, parameters))
        worker = 0.5 + 20 * inputs + 16 * outputs + 1 * live + 2 * parameters
        rows.append({"gpu_peak_bytes": {"oracle": GIB, "worker": worker * GIB}})
    found = fit.fit(rows, terms, "worker")
    assert found["rows"] == 6
    assert found["coefficients"] == {"fixed": 0.5, "inputs": 20.0, "outputs": 16.0,
                                     "live": 1.0, "parameters": 2.0}
    assert found["measured_over_fit_p10_p50_p90_max"] == [1.0, 1.0, 1.0, 1.0]
    session = fit.fit(rows, terms, "session")  # oracle and worker together: one GiB more
    assert session["coefficients"]["fixed"] == 1.5
    # a row without the re-check's peaks is left out of that fit, not counted as zero
    rows.append({"gpu_peak_bytes": {"oracle": GIB, "worker": GIB}})
    terms.append(_terms(inputs=5))
    for row in rows[:6]:
        row["gpu_peak_bytes"]["recheck_oracle"] = row["gpu_peak_bytes"]["worker"] / 2
    assert fit.fit(rows, terms, "recheck")["rows"] == 6
    assert fit.fit(rows, terms, "recheck")["coefficients"]["inputs"] == 10.0


def test_a_fit_tried_on_other_rows_says_how_many_it_covers():
    fit = bench_module("lane_memory_fit")
    coefficients = {"fixed": 1.0, "inputs": 10.0, "outputs": 0.0, "live": 0.0,
                    "parameters": 0.0}
    rows = [{"gpu_peak_bytes": {"oracle": 1 * GIB, "worker": 1 * GIB}},   # 2 of 2: at it
            {"gpu_peak_bytes": {"oracle": 3 * GIB, "worker": 3 * GIB}},   # 6 of 3: over
            {"gpu_peak_bytes": {"oracle": 1 * GIB, "worker": 1 * GIB}}]   # 2 of 11: under
    found = fit.tried(coefficients, rows, [_terms(0.1), _terms(0.2), _terms(1.0)], "session")
    assert found["at_or_under_fit"] == 2
    assert found["measured_over_fit_p10_p50_p90_max"][-1] == 2.0


def test_the_replay_sums_what_rows_judged_at_once_held_and_were_sized():
    fit = bench_module("lane_memory_fit")
    from kernelevo.suite.footprint import CONTEXT_BYTES, LANE_PROCESSES, Footprint

    contexts = LANE_PROCESSES * CONTEXT_BYTES / GIB
    # two rows overlapping from 5 s to 10 s, a third after them, judged alone
    rows = [{"ended_s": 10.0, "wall_s": 10.0, "lane_bytes": 10 * GIB,
             "gpu_peak_bytes": {"oracle": 20 * GIB, "worker": 30 * GIB}},
            {"ended_s": 12.0, "wall_s": 7.0, "lane_bytes": 10 * GIB,
             "gpu_peak_bytes": {"oracle": 10 * GIB, "worker": 10 * GIB,
                                "recheck_worker": 5 * GIB}},
            {"ended_s": 20.0, "wall_s": 5.0, "lane_bytes": 10 * GIB, "judged_alone": True,
             "gpu_peak_bytes": {"oracle": 1 * GIB, "worker": 1 * GIB}}]
    terms = [_terms(inputs=x) for x in (1.0, 2.0, 0.0)]
    result = fit.replay(rows, terms, gpu_gib=60.0)
    assert result["seconds"] == 20.0 and result["judged_alone_from_s"] == [15.0]
    sums = result["sums"]
    held = sums["measured peaks + contexts"]
    assert held["most_gib"] == round(50 + 25 + 2 * contexts, 1)
    assert held["seconds_above"] == 5.0 and held["stretches_above_s"] == [[5.0, 10.0]]
    assert sums["the pass's lane sizes"]["most_gib"] == 20.0
    now = sums["the suite's size now (footprint.py)"]
    sized = [Footprint(int(x * GIB), 0, 0, 0).lane_bytes() / GIB for x in (1.0, 2.0, 0.0)]
    assert now["most_gib"] == round(sized[0] + sized[1], 1)
