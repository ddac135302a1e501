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
