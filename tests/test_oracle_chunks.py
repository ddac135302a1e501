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
from kernelevo.evaluate.child.oracle_backward import output_error
from kernelevo.evaluate.shared.inputs import is_distribution
from tests.conftest import tensor_reads


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


def test_the_whole_output_checks_read_back_once_however_many_chunks(monkeypatch):
    """The rerun check and the reference's error against float64 sum their chunks on the
    device: a read per chunk waits for a GPU the other lanes share, 384 times at 1.6 G."""
    import kernelevo.evaluate.child.oracle_backward as oracle_backward

    generator = torch.Generator().manual_seed(4)
    a = torch.randn(1000, generator=generator)
    b = a + 1e-3 * torch.randn(1000, generator=generator)
    expected = float(((a.double() - b.double()).square().sum()
                      / b.double().square().sum()).sqrt())
    found = {}
    for chunk in (1 << 22, 16):
        monkeypatch.setattr(oracle, "_SAME_CHUNK", chunk)
        monkeypatch.setattr(oracle_backward, "_CHUNK", chunk)
        with tensor_reads() as reads:
            found[chunk] = (oracle._rerun_same(a, a.clone()), oracle._rerun_same(a, b),
                            output_error([a], [b]))
        assert len(reads) <= 3, (chunk, reads)  # one a check, whatever the chunks
    assert found[16][:2] == found[1 << 22][:2] == (True, False)
    assert math.isclose(found[16][2], expected, rel_tol=1e-12)
    assert math.isclose(found[1 << 22][2], expected, rel_tol=1e-12)
