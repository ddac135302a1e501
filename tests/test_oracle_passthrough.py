"""The oracle's copy check (an output equal to an input on every set) on large tasks: one set at a time, in chunks."""

from __future__ import annotations

import json

import torch

from kernelevo.evaluate.child import oracle
from kernelevo.evaluate.shared.messages import OracleJob


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


def test_a_near_copy_is_a_copy_only_within_the_runs_atol(monkeypatch):
    """The oracle holds outputs to the tolerance the candidate is held to: --atol included."""
    sets = [[torch.randn(100_000)] for _ in range(2)]
    outputs = [[values[0].clone()] for values in sets]
    for output in outputs:
        output[0][0] += 0.005  # beyond fp32's 1e-4, within an --atol of 0.05

    def found_with(atol):
        job = OracleJob(task_source="", device="cpu", dtype="float32", scratch="/tmp",
                        seeds=(0, 1), variants=(None, None), atol=atol)
        monkeypatch.setattr(oracle.task_inputs, "kept_inputs",
                            lambda module, seed, device, dtype, variant: sets[seed])
        return oracle._inputs_returned(None, job, [0, 1], [None, None], outputs, "cpu",
                                       torch.float32)

    assert found_with(None) == []
    assert found_with(0.05) == ["output 0: input 0 returned unchanged"]


NEAR_COPY_TASK = '''
import json

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        y = x.clone()
        y[0] += 0.005
        return y


def get_inputs():
    return [torch.randn(100_000)]


def get_init_inputs():
    return []
'''
NEAR_COPY_CANDIDATE = NEAR_COPY_TASK.replace("class Model(", "class ModelNew(")


def test_the_atol_flag_reaches_the_oracles_copy_check(tmp_path):
    from tests.test_cli import kernelevo

    task, candidate = tmp_path / "task.py", tmp_path / "candidate.py"
    task.write_text(NEAR_COPY_TASK)
    candidate.write_text(NEAR_COPY_CANDIDATE)
    flags = {}
    for atol in (None, "0.05"):
        done = kernelevo("eval", str(task), str(candidate), "--device", "cpu", "--sets", "2",
                         "--json", *(("--atol", atol) if atol else ()))
        assert done.stdout, done.stderr
        flags[atol] = json.loads(done.stdout)["flags"]
    copy = "trivial answer passes: output 0: input 0 returned unchanged"
    assert copy not in flags[None] and copy in flags["0.05"], flags
