"""bench/lane_memory_fit.py: the forward's live intermediates on the meta device, and the fit."""

from __future__ import annotations

import torch

from tests.conftest import bench_module


class _Chain:
    """x -> x * 2 -> + 1 -> sum over rows: two full-size tensors alive at once at most."""

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            doubled = x * 2
            shifted = doubled + 1
            del doubled
            return shifted.sum(dim=1)

    @staticmethod
    def get_inputs() -> list[torch.Tensor]:
        return [torch.randn(1000, 10)]

    @staticmethod
    def get_init_inputs() -> list:
        return []


class _Broken(_Chain):
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tensor(x.tolist())  # reads values: the meta device has none


def test_the_forwards_live_peak_counts_intermediates_alive_together():
    fit = bench_module("lane_memory_fit")
    assert fit.forward_live_peak(_Chain) == 2 * 1000 * 10 * 4
    assert fit.forward_live_peak(_Broken) == -1


def test_the_fit_recovers_a_linear_rule_and_says_how_far_each_row_is():
    fit = bench_module("lane_memory_fit")
    gib = float(1 << 30)
    terms, rows = [], []
    for inputs, outputs, live, parameters in [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0),
                                              (0, 0, 0, 1), (1, 1, 1, 1), (2, 1, 0, 3)]:
        terms.append({"fixed": 1.0, "inputs": inputs, "outputs": outputs, "live": live,
                      "parameters": parameters})
        worker = 0.5 + 20 * inputs + 16 * outputs + 1 * live + 2 * parameters
        rows.append({"gpu_peak_bytes": {"worker": worker * gib}})
    found = fit.fit(rows, terms, "worker")
    assert found["coefficients"] == {"fixed": 0.5, "inputs": 20.0, "outputs": 16.0,
                                     "live": 1.0, "parameters": 2.0}
    assert found["measured_over_fit_p10_p50_p90_max"] == [1.0, 1.0, 1.0, 1.0]


def test_the_replay_sums_what_rows_judged_at_once_would_hold():
    fit = bench_module("lane_memory_fit")
    from kernelevo.suite.footprint import LANE_MIN_BYTES

    gib = 1 << 30
    # two rows overlapping from 5 s to 10 s, a third alone after them
    rows = [{"ended_s": 10.0, "wall_s": 10.0, "lane_bytes": 10 * gib,
             "gpu_peak_bytes": {"oracle": 20 * gib, "worker": 30 * gib}},
            {"ended_s": 12.0, "wall_s": 7.0, "lane_bytes": 10 * gib,
             "gpu_peak_bytes": {"oracle": 10 * gib, "worker": 10 * gib}},
            {"ended_s": 20.0, "wall_s": 5.0, "lane_bytes": 10 * gib,
             "gpu_peak_bytes": {"oracle": 1 * gib, "worker": 1 * gib}}]
    terms = [{"fixed": 1.0, "inputs": x, "outputs": 0.0, "live": 0.0, "parameters": 0.0}
             for x in (1.0, 2.0, 0.0)]
    coefficients = {"fixed": 0.0, "inputs": 10.0, "outputs": 0.0, "live": 0.0, "parameters": 0.0}
    result = fit.replay(rows, terms, coefficients, gpu_gib=60.0)
    assert result["seconds"] == 20.0
    sums = result["sums"]
    assert sums["measured peaks (oracle + worker)"] == (70.0, 5.0)  # 50 + 20 from 5 to 10 s
    assert sums["lane estimate (footprint.py)"] == (20.0, 0.0)
    contexts = LANE_MIN_BYTES / gib
    assert sums["fit + contexts"][0] == round(30.0 + 2 * contexts, 1)
    assert sums["fit x 2 + contexts"][0] == round(60.0 + 2 * contexts, 1)
    assert sums["fit x 2 + contexts"][1] == 5.0  # above 60 GiB only while both run
