"""A candidate's @triton.autotune stops at its budget, runs on with the best config measured, and the verdict says so."""

from __future__ import annotations

import pytest

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.evaluate.child.autotune_budget import AutotuneBudget
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.verdict import AUTOTUNE_BUDGET_FLAG
from kernelevo.task import task_from_source

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + 1.0


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
'''

# Eight configs, each taking 0.2 s to "benchmark" (its own do_bench, so the
# interpreter needs no GPU driver): 1.6 s of autotuning per new key.
AUTOTUNED = '''
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl


def slow_bench(kernel_call, quantiles):
    kernel_call()
    time.sleep(0.2)
    return [1.0, 1.0, 1.0]


@triton.autotune(configs=[triton.Config({"BLOCK": 16 << i}) for i in range(8)],
                 key=["n"], do_bench=slow_bench)
@triton.jit
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        add_one[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        return out
'''

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _verdict(device: str, budget_s: float):
    config = EvalConfig(device=device, shrink_on_cpu=False, timeout_s=120.0, vary_shapes=False,
                        timing=TimingConfig(baselines=("eager",), autotune_budget_s=budget_s))
    judge = Judge(task_from_source(TASK, name="add_one"), config)
    return judge.evaluate(Candidate(source=AUTOTUNED, backend="triton", name="autotuned"))


@pytest.mark.parametrize("device", DEVICES)
def test_autotuning_past_its_budget_is_cut_and_named(device):
    verdict = _verdict(device, budget_s=0.5)
    assert verdict.reason == "passed", verdict.message
    assert AUTOTUNE_BUDGET_FLAG in verdict.flags
    note = next(n for n in verdict.notes if n.startswith("autotuning stopped"))
    assert "budget of 0.5 s" in note and "of 8 configs measured" in note
    measured = int(note.split(": ")[1].split(" of ")[0])
    assert 1 <= measured < 8  # 0.2 s each: the budget ends it after about three
    assert verdict.phases_s.get("autotune", 0) < 1.6  # the full sweep would take 1.6 s


@pytest.mark.parametrize("device", DEVICES)
def test_autotuning_within_its_budget_leaves_no_mark(device):
    verdict = _verdict(device, budget_s=60.0)
    assert verdict.reason == "passed", verdict.message
    assert AUTOTUNE_BUDGET_FLAG not in verdict.flags
    assert not any(n.startswith("autotuning stopped") for n in verdict.notes)
    assert verdict.phases_s.get("autotune", 0) >= 1.6  # every config measured


def test_each_candidate_of_a_job_has_its_own_account():
    budget = AutotuneBudget(1.0)
    budget.charge_to(0)
    budget.spend.spent_s, budget.spend.measured = 2.0, 5
    budget.charge_to(1)
    assert budget.report(1) == {"autotune_s": 0.0, "autotune_measured": 0,
                                "autotune_skipped": 0}
    budget.charge_to(0)
    assert budget.report(0)["autotune_measured"] == 5


def test_the_budget_is_a_timing_setting_with_a_default():
    assert TimingConfig().autotune_budget_s == 60.0
    with pytest.raises(Exception):
        TimingConfig(autotune_budget_s=0)


def test_a_failed_candidate_says_where_its_time_went():
    """A candidate that fails to run carries the seconds of the step that failed."""
    config = EvalConfig(device="cpu", shrink_on_cpu=False, timeout_s=120.0, vary_shapes=False,
                        timing=TimingConfig(baselines=("eager",)))
    broken = AUTOTUNED.replace("tl.load(x_ptr + offsets, mask=mask) + 1.0",
                               "tl.load(x_ptr + offsets, mask=mask) + undefined_name")
    verdict = Judge(task_from_source(TASK, name="add_one"), config).evaluate(
        Candidate(source=broken, backend="triton", name="broken"))
    assert verdict.reason != "passed"
    assert verdict.phases_s["failed_step"] > 0
