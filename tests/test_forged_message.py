"""A candidate that writes its own message to the worker's channel gets a verdict, not a crash."""

from __future__ import annotations

import json

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT

TASK = ROOT / "tests/fixtures/tasks/add.py"

# Finds the worker's connection to the judge and sends a message the harness
# never sends (a checked_candidate whose bundle is no table), then computes
# the right answer, as a candidate hiding behind a forged report would.
FORGER = '''
import gc
import json
from multiprocessing.connection import Connection

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask)
             + tl.load(y_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        for thing in gc.get_objects():
            if isinstance(thing, Connection) and not thing.closed:
                try:
                    thing.send_bytes(json.dumps({"kind": "checked_candidate", "candidate": 0,
                                                 "bundle": 5}).encode())
                except OSError:
                    pass
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
'''


def test_a_forged_message_on_the_channel_ends_the_job_with_a_verdict():
    judge = Judge(load_task(str(TASK)), EvalConfig(static_checks=False, vary_shapes=False))
    verdict = judge.evaluate(Candidate(source=FORGER, backend="triton", name="forger"))
    assert verdict.reason == "harness_tampered", (verdict.reason, verdict.message)
    assert "a message the harness never sends" in verdict.message
    assert "checked_candidate" in verdict.message  # the message's kind, as decoding named it


def test_a_candidate_cannot_put_baseline_times_in_the_store():
    """Only the warm-up, before any candidate loads, may speak of the baselines' store: a
    store message from the candidate's process ends its job as tampering."""
    forged = json.dumps({"kind": "baseline_times", "measures": {
        "call": {"eager": {"median_ms": 100.0, "iqr_ms": 0.0, "min_ms": 100.0,
                           "samples": 20}}}})
    source = FORGER.replace(
        'json.dumps({"kind": "checked_candidate", "candidate": 0,\n'
        '                                                 "bundle": 5}).encode()',
        f"{forged!r}.encode()")
    assert "baseline_times" in source
    judge = Judge(load_task(str(TASK)), EvalConfig(static_checks=False, vary_shapes=False))
    verdict = judge.evaluate(Candidate(source=source, backend="triton", name="forger"))
    assert verdict.reason == "harness_tampered", (verdict.reason, verdict.message)
    assert "baseline_times message after the worker's ready" in verdict.message
