"""The oracle's whole-output checks run a chunk at a time: no float64 copy of a full output.

KernelBench level 1's resized tasks hold 1.6 G elements an output; a float64
copy of one is 12 GiB, and the determinism check made two (the backward of
level-1 19, 23 and 26 then ran out of memory on an 80 GB H100, session 28).
"""

from __future__ import annotations

import math

import pytest
import torch

from kernelevo.evaluate.child import oracle
from kernelevo.evaluate.shared.inputs import is_distribution


@pytest.fixture()
def small_chunks(monkeypatch):
    monkeypatch.setattr(oracle, "_SAME_CHUNK", 16)


def test_a_difference_in_the_last_chunk_alone_is_found(small_chunks):
    a = torch.randn(10, 10)
    b = a.clone()
    assert oracle._rerun_same(a, b)
    b.view(-1)[-1] += 1e-3  # element 99: the seventh chunk of 16, the last
    assert not oracle._rerun_same(a, b)


def test_rounding_level_differences_and_matching_nans_are_the_same(small_chunks):
    a = torch.randn(50, dtype=torch.float64)
    a[7] = math.nan
    b = a * (1 + 1e-9)
    assert oracle._rerun_same(a, b)
    b[7] = 0.0
    assert not oracle._rerun_same(a, b)  # NaN in one run only


def test_integer_and_shape_changes_are_not_the_same(small_chunks):
    a = torch.arange(40)
    assert oracle._rerun_same(a, a.clone())
    assert not oracle._rerun_same(a, a.flip(0))
    assert not oracle._rerun_same(torch.zeros(4), torch.zeros(1))  # allclose would broadcast


def test_the_check_copies_no_more_than_a_chunk_to_float64(small_chunks, monkeypatch):
    widest = []
    double = torch.Tensor.double

    def counted(self):
        widest.append(self.numel())
        return double(self)

    monkeypatch.setattr(torch.Tensor, "double", counted)
    a = torch.randn(1000)
    assert oracle._rerun_same(a, a.clone())
    assert widest and max(widest) == 16


def test_probability_rows_are_found_without_a_float64_copy(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "double", lambda self: pytest.fail("a float64 copy"))
    rows = torch.softmax(torch.randn(8, 32), dim=-1)
    assert is_distribution(rows)
    assert not is_distribution(torch.rand(8, 32))
