"""Verdicts right in both directions: structured stress sets, PyTorch baselines, OOM, measures."""

import base64
import json
import types

import pytest
import torch

from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.config_file import load_eval_config
from kernelevo.errors import ConfigError
from kernelevo.evaluate.analysis import decide
from kernelevo.evaluate.parent import outcome, worker_state
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.shared.inputs import describe_stress, is_discrete, stress_tensor
from kernelevo.evaluate.verdict import (NO_CUSTOM_KERNEL_FLAG, TimingStats, Verdict, speedup,
                                        verdict_for)
from kernelevo.task import load_task
from tests.conftest import ROOT, write
from tests.test_cli import kernelevo

SCALE = 64.0


def test_stress_keeps_the_zeros_of_triangular_and_diagonal_inputs():
    lower = torch.tril(torch.randn(32, 32))
    stressed = stress_tensor(lower, SCALE)
    assert torch.equal(stressed == 0, lower == 0)
    factor = float(stressed.abs().max() / lower.abs().max())
    assert factor >= SCALE and torch.allclose(stressed, lower * factor)
    diagonal = torch.diag(torch.randn(16))
    assert torch.equal(stress_tensor(diagonal, SCALE) == 0, diagonal == 0)


def test_stress_keeps_symmetry_and_sign():
    x = torch.randn(24, 24)
    symmetric = x + x.T
    stressed = stress_tensor(symmetric, SCALE)
    assert torch.equal(stressed, stressed.T)
    assert float(stressed.abs().max()) > 10 * float(symmetric.abs().max())
    positive = torch.rand(1000) + 0.01
    assert bool((stress_tensor(positive, SCALE) > 0).all())
    negative = -positive
    assert bool((stress_tensor(negative, SCALE) < 0).all())


def test_stress_takes_small_ranges_beyond_where_exp_overflows():
    # torch.rand inputs (KernelBench's level 1) stay under 1: scaling alone by
    # 32 would keep exp() finite, and a softmax without max subtraction would pass.
    stressed = stress_tensor(torch.rand(64, 64), 32.0)
    assert float(stressed.max()) > 100 and bool((stressed > 0).all())


def test_stress_shifts_a_zero_mean_tensor_off_zero():
    x = torch.randn(10000)
    stressed = stress_tensor(x, SCALE)
    assert float(stressed.mean()) == pytest.approx(SCALE / 4, abs=SCALE * 0.05)


def test_stress_leaves_categorical_tensors_alone():
    targets = torch.randint(0, 2, (512,)).float() * 2 - 1
    assert is_discrete(targets)
    assert torch.equal(stress_tensor(targets, SCALE), targets)
    mask_as_float = (torch.rand(64, 64) > 0.5).float()
    assert torch.equal(stress_tensor(mask_as_float, SCALE), mask_as_float)
    assert not is_discrete(torch.randn(512))


def test_stress_leaves_probability_rows_alone():
    # KernelBench's KL divergence takes softmax outputs: scaled, they are no
    # distribution, and the loss becomes cancellation noise.
    rows = torch.rand(32, 100).softmax(dim=-1)
    assert torch.equal(stress_tensor(rows, SCALE), rows)
    assert not torch.equal(stress_tensor(torch.rand(32, 100), SCALE), torch.rand(32, 100))


def test_stress_never_touches_integer_or_bool_inputs(tmp_path):
    task = write(tmp_path, "mixed.py", """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x, labels, mask):
        return x
def get_inputs():
    return [torch.randn(8, 8), torch.randint(0, 10, (8,)), torch.rand(8, 8) > 0.5]
def get_init_inputs():
    return []
""")
    from kernelevo.evaluate.shared.inputs import import_source, make_inputs

    module = import_source(task.read_text(), "kernelevo_test_mixed", tmp_path)
    plain = make_inputs(module, 7, "cpu", torch.float32)
    stressed = make_inputs(module, 7, "cpu", torch.float32, variant=SCALE)
    assert torch.equal(plain[1], stressed[1]) and stressed[1].dtype == torch.int64
    assert torch.equal(plain[2], stressed[2]) and stressed[2].dtype == torch.bool
    assert not torch.allclose(plain[0], stressed[0])
    assert "stress set of scale 64" in describe_stress(stressed, SCALE)


def _outputs(values: list[torch.Tensor]) -> dict:
    sets = [{"values": [v], "structure": "tensor"} for v in values]
    return {"sets": sets, "repeat": sets[0]}


def test_a_candidate_wrong_only_on_the_stress_set_gets_its_own_reason():
    references = [[torch.ones(4)], [torch.ones(4) * 2], [torch.ones(4) * 3]]
    got = _outputs([torch.ones(4), torch.ones(4) * 2, torch.full((4,), float("inf"))])
    decision = decide.decide_correctness(got, references, "tensor", [(1e-4, 1e-4)], "cpu",
                                         stress={2: "stress set of scale 90; input 0 in [-1, 1]"})
    assert decision.reason == "stress_inputs_failed"
    assert "input set 2" in decision.message and "scale 90" in decision.message


def test_a_candidate_wrong_on_the_tasks_own_inputs_gets_the_plain_reason():
    references = [[torch.ones(4)], [torch.ones(4) * 2], [torch.ones(4) * 3]]
    # Wrong on set 1 and on the stress set: set 1 is judged first and decides.
    got = _outputs([torch.ones(4), torch.zeros(4), torch.zeros(4)])
    decision = decide.decide_correctness(got, references, "tensor", [(1e-4, 1e-4)], "cpu",
                                         stress={2: "stress"})
    assert decision.reason == "output_mismatch" and "input set 1" in decision.message


MATMUL_TASK = """
import torch
import torch.nn as nn
N = 48
class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]
def get_init_inputs():
    return []
"""

REFERENCE_RENAMED = """
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
"""


def test_the_reference_renamed_is_a_baseline_not_a_passing_kernel(tmp_path):
    task = write(tmp_path, "matmul.py", MATMUL_TASK)
    candidate = write(tmp_path, "renamed.py", REFERENCE_RENAMED)
    done = kernelevo("eval", str(task), str(candidate), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    verdict = Verdict.from_dict(json.loads(done.stdout))
    assert (verdict.status, verdict.reason) == ("ok", "pytorch_only")
    assert NO_CUSTOM_KERNEL_FLAG in verdict.flags
    assert not verdict.passed_kernel
    # Claiming a backend it does not use is rejected outright.
    claimed = kernelevo("eval", str(task), str(candidate), "--backend", "triton", "--json")
    assert claimed.returncode == 1
    assert json.loads(claimed.stdout)["reason"] == "no_custom_kernel"


def test_a_passing_kernel_is_ok_without_the_flag():
    assert verdict_for("passed").passed_kernel
    baseline = verdict_for("pytorch_only", flags=(NO_CUSTOM_KERNEL_FLAG,))
    assert baseline.ok and not baseline.passed_kernel


def test_out_of_memory_in_the_judges_process_is_a_verdict(monkeypatch):
    judge = Judge(load_task(str(ROOT / "tests/fixtures/tasks/add.py")), EvalConfig())

    def exhausted(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(judge, "_run", exhausted)
    from kernelevo.candidate import load_candidate

    verdict = judge.evaluate(load_candidate(ROOT / "tests/fixtures/candidates/honest_add.py"))
    assert (verdict.status, verdict.reason) == ("runtime_error", "out_of_memory")
    assert "judge" in verdict.message and "2.00 GiB" in verdict.message


def _full_gpu_judge(monkeypatch, room_at_chunks: int | None):
    """judge_candidate with a comparison that runs out of GPU memory unless its chunks are
    of at most `room_at_chunks` elements (None: never on the GPU); the devices and chunks
    it was tried with."""
    from kernelevo.evaluate.analysis import tolerance

    tried = []

    def judge_on(state, index, report, device, off_gpu=None):
        chunk = tolerance._chunk_elements.get() or tolerance.CHUNK_ELEMENTS
        tried.append((device, chunk) if off_gpu is None else (device, chunk, "off the GPU"))
        if device != "cpu" and (room_at_chunks is None or chunk > room_at_chunks):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return "passed", {"metrics": None, "notes": []}

    class State:
        phases: dict = {}
        off_gpu = object()  # what the CPU's decision is handed (the session's hold given up)

        class judge:
            compare_device = "cuda:0"

    monkeypatch.setattr(worker_state, "_judge_on", judge_on)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return State, tried


def test_comparison_moves_to_the_cpu_when_the_gpu_is_full(monkeypatch):
    from kernelevo.evaluate.analysis import tolerance

    State, tried = _full_gpu_judge(monkeypatch, None)
    assert worker_state.judge_candidate(State(), 0, {})[0] == "passed"
    assert tried == [("cuda:0", tolerance.CHUNK_ELEMENTS),
                     ("cuda:0", tolerance.SMALL_CHUNK_ELEMENTS),
                     ("cpu", tolerance.CHUNK_ELEMENTS, "off the GPU")]
    # where the decision's time went, for the row's phases
    assert set(State.phases) == {"decide", "decide_small_chunks", "decide_cpu"}
    assert State.phases["decide"] >= State.phases["decide_cpu"] >= 0.0


def test_comparison_stays_on_the_gpu_in_smaller_chunks_where_they_fit(monkeypatch):
    """A suite's lanes fill the GPU; on the CPU the comparison took 32-63 s a row, every
    lane's timing waiting behind the worker's hold meanwhile."""
    from kernelevo.evaluate.analysis import tolerance

    State, tried = _full_gpu_judge(monkeypatch, tolerance.SMALL_CHUNK_ELEMENTS)
    assert worker_state.judge_candidate(State(), 0, {})[0] == "passed"
    assert [device for device, _ in tried] == ["cuda:0", "cuda:0"]
    assert tried[1][1] == tolerance.SMALL_CHUNK_ELEMENTS
    assert set(State.phases) == {"decide", "decide_small_chunks"}
    assert tolerance._chunk_elements.get() is None  # the smaller chunks end with the decision


def test_a_candidates_outputs_are_compared_in_place_on_the_gpu_and_copied_for_the_cpu(
        monkeypatch):
    asked = []

    def import_bundle(bundle, device, gpu, copy=True):
        asked.append((device, copy))
        return {"set_0": ["out"], "repeat": ["again"]}

    class Report:
        bundle, structures = {}, {}

    class Judge:
        gpu_index = 0

    monkeypatch.setattr(worker_state, "import_bundle", import_bundle)
    for device in ("cuda:0", "cpu"):
        outputs = worker_state._outputs_from(Report(), 1, Judge(), device)
        assert outputs["sets"][0]["values"] == ["out"]
    # mapped from the worker's memory on its GPU; a copy only where the comparison moves
    assert asked == [("cuda:0", False), ("cpu", True)]


def test_the_time_to_open_the_workers_outputs_is_a_phase_of_the_decision(monkeypatch):
    """`decide_outputs`: of `decide`, the worker's outputs opened here, counted also where
    they could not be read (the decision then fails the candidate)."""
    import time as clock

    from kernelevo.evaluate.shared.transfer import TransferError

    def slow_outputs(report, count, judge, device):
        clock.sleep(0.05)
        if report == "forged":
            raise TransferError("invalid handle")
        return {"sets": []}

    state = types.SimpleNamespace(phases={}, reference=types.SimpleNamespace(outputs=[]),
                                  judge=None)
    monkeypatch.setattr(worker_state, "_outputs_from", slow_outputs)
    monkeypatch.setattr(worker_state, "_decide", lambda *args: ("passed", {}))
    assert worker_state._judge_on(state, 0, "report", "cuda:0")[0] == "passed"
    assert 0.05 <= state.phases["decide_outputs"] < 1.0
    failed = worker_state._judge_on(state, 0, "forged", "cuda:0")
    assert failed[1]["reason"] == "harness_tampered"
    assert state.phases["decide_outputs"] >= 0.1  # both openings, summed


def _mapped_tensor_whose_copy_fails(monkeypatch, error: Exception) -> dict:
    """A well-formed description whose mapping works and whose copy to `device` raises."""
    from torch.multiprocessing import reductions

    class Mapped:
        def to(self, device, copy=False):
            raise error

    monkeypatch.setattr(reductions, "rebuild_cuda_tensor", lambda *args: Mapped())
    handle = base64.b64encode(b"h").decode()
    return {"kind": "cuda", "items": {"set_0": [{
        "dtype": "float32", "shape": [4], "stride": [1], "offset": 0, "device": 0,
        "handle": handle, "size_bytes": 16, "offset_bytes": 0, "counter_handle": handle,
        "counter_offset": 0, "event_handle": handle, "event_sync": False}]}}


def test_a_full_gpu_while_copying_outputs_is_the_judges_and_not_tampering(monkeypatch):
    """A suite on a fresh H100 read an honest kernel `harness_tampered`: the judge's copy of its
    outputs ran out of memory while other lanes held the GPU (bench/RESULTS.md, session 26)."""
    from kernelevo.evaluate.shared import transfer

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    full = _mapped_tensor_whose_copy_fails(
        monkeypatch, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 MiB"))
    with pytest.raises(torch.OutOfMemoryError):
        transfer.import_bundle(full, "cuda:0", None)
    forged = _mapped_tensor_whose_copy_fails(monkeypatch, RuntimeError("invalid handle"))
    with pytest.raises(transfer.TransferError, match="invalid handle"):
        transfer.import_bundle(forged, "cuda:0", None)


def test_the_references_outputs_are_kept_on_the_cpu_when_the_gpu_is_full(monkeypatch):
    from kernelevo.evaluate.parent import oracle_run

    devices = []

    def import_bundle(bundle, device, gpu):
        devices.append(device)
        if device != "cpu":
            raise torch.OutOfMemoryError("CUDA out of memory")
        return {"set_0": [torch.ones(2)]}

    judge = types.SimpleNamespace(compare_device="cuda:0", gpu_index=None)
    monkeypatch.setattr(oracle_run, "import_bundle", import_bundle)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert oracle_run._reference_copy({}, judge)["set_0"][0].device.type == "cpu"
    assert devices == ["cuda:0", "cpu"]


def test_a_reference_sent_as_a_file_is_read_again_onto_the_cpu_when_the_gpu_is_full(
        monkeypatch, tmp_path):
    """An oracle whose outputs are all on the CPU sends them as a file; the judge's copy onto
    a full GPU failed, and the file was gone before its copy onto the CPU."""
    from kernelevo.evaluate.parent import oracle_run
    from kernelevo.evaluate.shared import transfer

    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        if args and str(args[0]).startswith("cuda"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    sent = transfer.export_bundle({"set_0": [torch.arange(4.0)], "set_1": [torch.ones(2)]},
                                  tmp_path)
    assert sent["kind"] == "file"
    judge = types.SimpleNamespace(compare_device="cuda:0", gpu_index=None)
    copied = oracle_run._reference_copy(sent, judge)
    assert copied["set_0"][0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert copied["set_1"][0].device.type == "cpu"
    assert list(tmp_path.iterdir()) == []  # read onto the CPU, then removed
    with pytest.raises(transfer.TransferError, match="unreadable"):
        transfer.import_bundle(sent, "cpu")  # once only


def test_a_candidates_outputs_sent_as_a_file_are_read_again_when_the_comparison_runs_out_of_room(
        monkeypatch, tmp_path):
    """The GPU may run out of room after the copy, in the comparison: the judge then reads the
    outputs again (smaller chunks, then the CPU), and the file must still be there."""
    from kernelevo.evaluate.shared import transfer

    monkeypatch.setattr(torch.Tensor, "to", lambda self, *args, **kwargs: self)  # 'on the GPU'
    sent = transfer.export_bundle({"set_0": [torch.arange(3.0)]}, tmp_path)
    first = transfer.import_bundle(sent, "cuda:0")
    again = transfer.import_bundle(sent, "cuda:0")  # smaller chunks, after an OOM
    last = transfer.import_bundle(sent, "cpu")  # the CPU, after another
    assert first["set_0"][0].tolist() == again["set_0"][0].tolist() == last["set_0"][0].tolist()
    assert list(tmp_path.iterdir()) == []


def _stats(median: float, mean: float, method: str) -> TimingStats:
    return TimingStats(median, 0.0, median, 10, method, mean)


def test_kernelbench_speedups_use_means_like_its_harness():
    own, eager = _stats(1.0, 2.0, "kernelbench"), _stats(3.0, 3.0, "kernelbench")
    assert speedup(eager, own) == pytest.approx(1.5)
    own, eager = _stats(1.0, 2.0, "events"), _stats(3.0, 3.0, "events")
    assert speedup(eager, own) == pytest.approx(3.0)


def test_verdicts_with_every_measure_survive_json():
    measures = {"gpu": {"candidate": _stats(0.01, 0.011, "events"),
                        "eager": _stats(0.02, 0.021, "events")},
                "call": {"candidate": _stats(0.03, 0.03, "call_loop"),
                         "eager": _stats(0.025, 0.025, "call_loop")}}
    verdict = verdict_for("passed", timings=measures["gpu"], measures=measures,
                          timing_measure="gpu", speedup_vs_eager=2.0)
    again = Verdict.from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert again == verdict
    note = outcome.measures_note(measures, "gpu")
    assert "speedups use GPU time" in note and "GPU time 2.00x" in note
    assert "call time 0.83x" in note


def test_the_timing_measure_is_validated():
    assert load_eval_config(None, measure="call").timing.measure == "call"
    with pytest.raises(ConfigError, match="timing measure: expected one of gpu, call, "
                       "kernelbench, got 'wall'"):
        TimingConfig(measure="wall")
    with pytest.raises(ConfigError, match="timing baselines: expected one of eager, compile, "
                       "got 'inductor'"):
        TimingConfig(baselines=("eager", "inductor"))


def test_the_cli_rejects_an_unknown_timing_measure():
    done = kernelevo("eval", str(ROOT / "tests/fixtures/tasks/add.py"),
                     str(ROOT / "tests/fixtures/candidates/honest_add.py"), "--timing", "wall")
    assert done.returncode == 2 and "'wall' is not one of" in done.stderr


RELU_OF_RAND = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.rand(64, 48)]
def get_init_inputs():
    return []
"""

COPY_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
"""


def test_a_task_whose_output_is_its_input_is_flagged_degenerate(tmp_path):
    from kernelevo.candidate import load_candidate

    task = write(tmp_path, "relu_rand.py", RELU_OF_RAND)
    candidate = write(tmp_path, "copy.py", COPY_KERNEL)
    verdict = Judge(load_task(str(task)), EvalConfig()).evaluate(load_candidate(candidate))
    # Right on the task's contract (its inputs are never negative), so it passes,
    # but the verdict says that a copy passes, so the pass proves little.
    assert verdict.reason == "passed"
    assert "trivial answer passes: output 0: input 0 returned unchanged" in verdict.flags
    assert any(note.startswith("degenerate task") for note in verdict.notes)


ATTENTION_TASK = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
def get_inputs():
    return [torch.randn(2, 4, 128, 64) for _ in range(3)]
def get_init_inputs():
    return []
"""

SOFTMAX_TASK = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
def get_inputs():
    return [torch.randn(16, 4096)]
def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("source, kept", [(SOFTMAX_TASK, 117.0), (ATTENTION_TASK, 2.0)])
def test_a_stress_set_backs_off_where_the_reference_itself_is_not_sure(tmp_path, source, kept):
    """Softmax at scale 117 is exact enough: its stress set stays (a kernel without
    the max subtraction overflows there). Attention's logits at that scale
    reach ~1e5: their float32 rounding moves the reference's own answer beyond
    the tolerance (its float64 answer says so), and an honest kernel rounding
    otherwise was failed; the set backs off to a scale where the reference is sure."""
    from kernelevo.evaluate.shared import inputs as task_inputs
    from kernelevo.evaluate.shared.messages import OracleJob
    from kernelevo.evaluate.child.oracle import _run_in_domain

    module = task_inputs.import_source(source, f"stress_{kept:g}".replace(".", "_"), tmp_path)
    model = task_inputs.build_model(module.Model, [], "cpu", torch.float32)
    job = OracleJob(task_source=source, device="cpu", dtype="float32", scratch=str(tmp_path),
                    seeds=(1234,), variants=(117.0,))
    result, _, scale = _run_in_domain(model, module, job, 1234, "cpu", torch.float32, 117.0,
                                      [[torch.ones(1)]])
    assert scale == kept and result is not None
    wide = model.double()(*[t.double() for t in
                            task_inputs.kept_inputs(module, 1234, "cpu", torch.float32, scale)])
    assert torch.allclose(result[0].double(), wide, atol=2.5e-5, rtol=2.5e-5)
