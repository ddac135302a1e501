"""Shapes beyond the task's own, checked by default: a general kernel passes, one
that refuses other sizes passes flagged (and exports with a guard), one that is
silently wrong at other sizes does not pass."""

import pytest
import torch

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.verdict import SPECIALISED_FLAG
from kernelevo.export_guard import GUARD_SOURCE
from kernelevo.task import task_from_source

# Small enough for the interpreter as it is (no shrinking): 16 x 32 = 512
# elements, 32-wide blocks divide it exactly; perturbed sizes are 15 x 29.
TASK = '''
import torch
import torch.nn as nn

rows = 16
cols = 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return x * 2.0 + y


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    {mask}
    x = tl.load(x_ptr + offsets, {load_mask})
    y = tl.load(y_ptr + offsets, {load_mask})
    tl.store(out_ptr + offsets, x * 2.0 + y, {load_mask})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        {refuse}
        out = torch.empty_like(x)
        n = x.numel()
        axpy[({grid},)](x, y, out, n, BLOCK=32)
        return out
'''

GENERAL = KERNEL.format(mask="mask = offsets < n", load_mask="mask=mask", refuse="",
                        grid="triton.cdiv(n, 32)")
SILENTLY_WRONG = KERNEL.format(mask="", load_mask="", refuse="", grid="n // 32")
REFUSES = KERNEL.format(mask="", load_mask="", grid="n // 32", refuse=(
    "if x.shape != (16, 32):\n"
    "            raise ValueError(f'built for 16 x 32 only, got {tuple(x.shape)}')"))


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _judge(device: str, **changes) -> Judge:
    config = EvalConfig(device=device, shrink_on_cpu=False, timeout_s=60.0,
                        timing=TimingConfig(baselines=("eager",)), **changes)
    return Judge(task_from_source(TASK, name="axpy"), config)


def _verdict(source: str, device: str, **changes):
    return _judge(device, **changes).evaluate(Candidate(source=source, backend="triton",
                                                        name="c"))


def test_shapes_are_varied_by_default():
    assert EvalConfig().vary_shapes is True


@pytest.mark.parametrize("device", DEVICES)
def test_general_kernel_passes_and_says_where_it_was_checked(device):
    verdict = _verdict(GENERAL, device)
    assert verdict.reason == "passed", verdict.message
    assert SPECIALISED_FLAG not in verdict.flags
    assert any("also correct at rows=15, cols=29" in note for note in verdict.notes)
    # the wait for the re-check is a phase of its own, within the total (on a GPU
    # the re-check runs beside the evaluation, and may be done before it: 0)
    assert 0 <= verdict.phases_s["shape_variation"] < verdict.phases_s["total"]
    # and the re-check's own phases are there apart, for where its time went
    assert verdict.phases_s["recheck_correctness"] > 0
    assert "recheck_total" not in verdict.phases_s


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_silently_wrong_at_other_sizes_does_not_pass(device):
    verdict = _verdict(SILENTLY_WRONG, device)
    assert not verdict.ok
    assert verdict.reason == "shape_specialised"
    assert "rows=15, cols=29" in verdict.message


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_silently_wrong_at_other_sizes_passes_with_variation_off(device):
    # The task's own size is a multiple of the block: only another size shows it.
    assert _verdict(SILENTLY_WRONG, device, vary_shapes=False).reason == "passed"


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_that_refuses_other_sizes_passes_flagged(device):
    verdict = _verdict(REFUSES, device)
    assert verdict.reason == "passed", verdict.message
    assert SPECIALISED_FLAG in verdict.flags
    assert any("refuses other sizes" in note and "built for 16 x 32 only" in note
               for note in verdict.notes)


def test_the_re_check_started_beside_the_evaluation_judges_the_same():
    """The GPU's way (vary_beside): the other sizes' session starts with the
    evaluation and is used for the re-check; dropped when nothing passed."""
    import time

    from kernelevo.evaluate.parent import session as session_module

    judge = _judge("cpu")
    judge.vary_beside = True
    started = []
    real = session_module.Session.__init__

    def recording(self, judge_, task, *args, **kwargs):
        started.append(task.constants)
        real(self, judge_, task, *args, **kwargs)

    session_module.Session.__init__ = recording
    try:
        general = judge.evaluate(Candidate(source=GENERAL, backend="triton", name="g"))
        wrong = judge.evaluate(Candidate(source=SILENTLY_WRONG, backend="triton", name="w"))
        broken = judge.evaluate(Candidate(source=GENERAL.replace("x * 2.0", "x * 3.0"),
                                          backend="triton", name="b"))
    finally:
        session_module.Session.__init__ = real
    assert general.reason == "passed", general.message
    assert any("also correct at rows=15, cols=29" in note for note in general.notes)
    assert wrong.reason == "shape_specialised"
    assert broken.reason == "output_mismatch"
    # One session at the task's sizes and one at the other sizes per candidate,
    # each started up front: none started late for the re-check.
    assert started == [{"rows": 16, "cols": 32}, {"rows": 15, "cols": 29}] * 3
    # The failing candidate's re-check session was not needed: it is gone.
    deadline = time.monotonic() + 30
    while any(s.judge is judge for s in list(session_module._live)) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(s.judge is judge for s in list(session_module._live))


def test_a_judge_with_standby_keeps_the_re_check_s_session_warm_too():
    """With standby on (a service, a suite lane), the re-check beside each
    evaluation after the first uses a session started before that evaluation
    (its oracle's reference at the other sizes made ahead), and its verdicts
    are the ones a cold re-check gives. Closing the judge ends both standbys."""
    import time

    from kernelevo.evaluate.parent import other_sizes
    from kernelevo.evaluate.parent import session as session_module

    judge = Judge(task_from_source(TASK, name="axpy"),
                  EvalConfig(device="cpu", shrink_on_cpu=False, timeout_s=60.0,
                             timing=TimingConfig(baselines=("eager",))), standby=True)
    judge.vary_beside = True
    born: dict[int, float] = {}
    used: list[tuple[float | None, float]] = []  # (the re-check session's birth, evaluate's start)
    real_session, real_recheck = session_module.Session.__init__, other_sizes.Recheck.__init__
    evaluating = [0.0]

    def recording_session(self, *args, **kwargs):
        born[id(self)] = time.monotonic()
        real_session(self, *args, **kwargs)

    def recording_recheck(self, judge_, task, candidates, session=None):
        used.append((born.get(id(session)) if session is not None else None, evaluating[0]))
        real_recheck(self, judge_, task, candidates, session)

    session_module.Session.__init__ = recording_session
    other_sizes.Recheck.__init__ = recording_recheck
    try:
        verdicts = []
        for name, source in (("g", GENERAL), ("w", SILENTLY_WRONG), ("g2", GENERAL)):
            evaluating[0] = time.monotonic()
            verdicts.append(judge.evaluate(Candidate(source=source, backend="triton", name=name)))
    finally:
        session_module.Session.__init__ = real_session
        other_sizes.Recheck.__init__ = real_recheck
        judge.close()
    assert [v.reason for v in verdicts] == ["passed", "shape_specialised", "passed"], \
        [v.message for v in verdicts]
    assert any("also correct at rows=15, cols=29" in note for note in verdicts[2].notes)
    assert "rows=15, cols=29" in verdicts[1].message
    assert used[0][0] is None  # the first evaluation's re-check starts cold
    for birth, evaluation_start in used[1:]:
        assert birth is not None and birth < evaluation_start
    deadline = time.monotonic() + 30
    while any(s.judge is judge and s.alive() for s in list(session_module._live)) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(s.judge is judge and s.alive() for s in list(session_module._live))


def test_export_guard_raises_at_other_shapes_and_runs_at_the_task_s():
    # The guard wraps whatever forward the exported module has; a plain torch
    # ModelNew keeps this test about the guard. The task's part (sizes and
    # get_inputs, the reference Model left out) follows it, as in an export.
    model_new = (
        "import torch\nimport torch.nn as nn\n\n"
        "class ModelNew(nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return x * 2.0 + y\n")
    task_part = TASK.replace("    def forward(self, x, y):\n        return x * 2.0 + y\n", "")
    namespace: dict = {}
    exec(model_new + task_part + GUARD_SOURCE, namespace)
    model = namespace["ModelNew"]()
    x, y = torch.randn(16, 32), torch.randn(16, 32)
    assert torch.equal(model(x, y), x * 2.0 + y)
    with pytest.raises(ValueError, match="specialised to input shapes"):
        model(torch.randn(15, 32), torch.randn(15, 32))


def test_memory_that_ran_out_beside_the_evaluation_gets_the_re_check_run_alone(monkeypatch):
    """Two sessions at once hold twice the GPU memory: a re-check beside the
    evaluation that ran out of it is no finding about other sizes, and is run
    again alone (a kernel right there then passes, not `shape_specialised`)."""
    from kernelevo.evaluate.parent.other_sizes import Recheck
    from kernelevo.evaluate.verdict import verdict_for

    judge = _judge("cpu")
    judge.vary_beside = True
    monkeypatch.setattr(Recheck, "verdicts", lambda self: [
        verdict_for("out_of_memory", "CUDA out of memory (beside the evaluation)")])
    verdict = judge.evaluate(Candidate(source=GENERAL, backend="triton", name="g"))
    assert verdict.reason == "passed", verdict.message
    assert any("also correct at rows=15, cols=29" in note for note in verdict.notes)


# Right for its first calls at a size, then raising: the twelfth call at the
# sizes `AT` names on. Correctness makes fewer calls than that at any size; a
# stand-in for timing (calls on rotated inputs) makes more.
TIRES = GENERAL.replace("    def forward(self, x, y):\n", """    def forward(self, x, y):
        if AT(x.shape):
            SEEN.append(x.shape)
            if len(SEEN) >= 12:
                raise RuntimeError("tired after 11 calls")
""")


def test_the_re_check_leaves_calls_on_rotated_inputs_to_the_evaluation_it_re_checks():
    """Untimed (here, the CPU), the evaluation calls the candidate on rotated
    inputs for a while, and a candidate that goes wrong after some calls fails
    there; the re-check at other sizes makes only its correctness calls."""
    at_other_sizes = "SEEN = []\nAT = lambda shape: tuple(shape) != (16, 32)\n" + TIRES
    verdict = _verdict(at_other_sizes, "cpu")
    assert verdict.reason == "passed", verdict.message
    assert any("also correct at rows=15, cols=29" in note for note in verdict.notes)
    at_task_sizes = "SEEN = []\nAT = lambda shape: tuple(shape) == (16, 32)\n" + TIRES
    verdict = _verdict(at_task_sizes, "cpu")
    assert not verdict.ok
    assert "tired after 11 calls" in verdict.message, verdict.message
