"""The oracle's copy check (an output equal to an input on every set) on large tasks: one set at a time, in chunks."""

from __future__ import annotations

import torch

from kernelevo.evaluate import oracle
from kernelevo.evaluate.messages import OracleJob


def _job(sets: int) -> OracleJob:
    return OracleJob(task_source="", device="cpu", dtype="float32", scratch="/tmp",
                     seeds=tuple(range(sets)), variants=(None,) * sets)


def _check(monkeypatch, inputs: list[list[torch.Tensor]], outputs: list[list[torch.Tensor]]):
    made = []

    def kept_inputs(module, seed, device, dtype, variant):
        made.append(seed)
        return inputs[seed]

    monkeypatch.setattr(oracle.task_inputs, "kept_inputs", kept_inputs)
    found = oracle._inputs_returned(None, _job(len(inputs)), list(range(len(inputs))),
                                    [None] * len(inputs), outputs, "cpu", torch.float32)
    return found, made


def test_a_copy_on_every_set_is_found_across_chunks(monkeypatch):
    monkeypatch.setattr(oracle, "_SAME_CHUNK", 1000)  # 5 chunks per tensor
    sets = [[torch.rand(5000), torch.rand(5000)] for _ in range(3)]
    found, made = _check(monkeypatch, sets, [[values[1].clone()] for values in sets])
    assert found == ["output 0: input 1 returned unchanged"]
    assert made == [0, 1, 2]


def test_a_difference_in_the_last_chunk_is_not_a_copy(monkeypatch):
    monkeypatch.setattr(oracle, "_SAME_CHUNK", 1000)
    sets = [[torch.rand(5000)] for _ in range(2)]
    outputs = [[values[0].clone()] for values in sets]
    outputs[1][0][-1] += 1.0  # the second set's last element only
    found, _ = _check(monkeypatch, sets, outputs)
    assert found == []


def test_sets_after_the_first_difference_are_never_made(monkeypatch):
    """No copy on set 0: the other sets (6.4 GB each at full size) are not made at all."""
    sets = [[torch.rand(100)] for _ in range(4)]
    found, made = _check(monkeypatch, sets, [[torch.rand(100)] for _ in range(4)])
    assert found == [] and made == [0]
