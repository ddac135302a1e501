"""speed_agreement.py's summary: how far call milliseconds follow the host's speed."""

from __future__ import annotations


import pytest

from tests.conftest import bench_module


def _agreement():
    return bench_module("speed_agreement")


def _row(host: float, eager: float, candidate: float) -> dict:
    """A call row whose judge read `host` times plain's probe and these ms ratios."""
    return {"judge_host_us": 100.0 * host, "plain_host_us": [100.0, 100.0],
            "eager_ms": 0.02 * eager, "plain_ref_ms": [0.02], "candidate_ms": 0.05 * candidate,
            "plain_cand_ms": [0.05, 0.05]}


def test_milliseconds_that_scale_with_the_probe_correlate_fully_and_unrelated_ones_do_not():
    follows = _agreement().host_follows(
        [_row(0.5, 0.6, 0.7), _row(1.0, 1.0, 1.0), _row(2.0, 1.7, 1.4), _row(1.4, 1.3, 1.2)])
    assert follows == (pytest.approx(1.0, abs=0.01), pytest.approx(1.0, abs=0.01))
    eager, candidate = _agreement().host_follows(
        [_row(0.5, 1.0, 1.2), _row(1.0, 1.3, 0.9), _row(2.0, 1.0, 1.1), _row(1.4, 0.8, 0.8)])
    assert abs(eager) < 0.5 and abs(candidate) < 0.5


def test_too_few_rows_or_no_spread_give_no_correlation():
    module = _agreement()
    assert module.host_follows([_row(0.5, 0.6, 0.7), _row(2.0, 1.7, 1.4)]) is None
    assert module.host_follows([_row(1.0, 0.6, 0.7), _row(1.0, 1.7, 1.4),
                                _row(1.0, 1.0, 1.0)]) is None
