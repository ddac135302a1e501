"""The own-kernel share of a call and of a training step, and what the verdict makes of it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kernelevo.config import EvalConfig
from kernelevo.evaluate.analysis.kernel_share import (TRAIN_BACKWARD, TRAIN_FORWARD, is_own,
                                                      kernel_share, no_own_backward,
                                                      training_share, unrecorded_training_note)
from kernelevo.evaluate.analysis.profile import TraceEvent
from kernelevo.evaluate.child.share_training import training_step_share
from kernelevo.evaluate.parent import outcome
from kernelevo.evaluate.parent.outcome import kernel_time_note, training_time_note
from kernelevo.evaluate.shared.messages import Timing
from kernelevo.evaluate.verdict import REASONS, verdict_for


def _span(label: str, start: float, duration: float) -> TraceEvent:
    return TraceEvent(label, "user_annotation", start, duration)


def _kernel(name: str, start: float, duration: float, category: str = "kernel") -> TraceEvent:
    return TraceEvent(name, category, start, duration)


def _step(backward: list[TraceEvent]) -> list[TraceEvent]:
    """A warm step's kernels, then a forward span with its own kernel, then `backward`'s span."""
    return ([_kernel("_layernorm_forward", 0, 50), _kernel("elementwise_kernel", 60, 30),
             _span(TRAIN_FORWARD, 100, 20), _kernel("_layernorm_forward", 102, 10),
             # kineto's GPU-side copy of a span is no span of its own
             TraceEvent(TRAIN_BACKWARD, "gpu_user_annotation", 100, 1000),
             _span(TRAIN_BACKWARD, 200, 50)] + backward)


def test_a_share_sums_each_kernel_by_name_and_keeps_the_busiest():
    share = kernel_share([("a", 3.0, True), ("b", 5.0, False), ("a", 2.0, True),
                          ("Memcpy DtoD", 0.0, False)])
    assert share["own_us"] == 5.0 and share["total_us"] == 10.0
    assert share["own_share"] == pytest.approx(0.5)
    assert share["kernels"] == {"a": {"us": 5.0, "own": True}, "b": {"us": 5.0, "own": False}}
    many = kernel_share([(f"k{i}", float(i), False) for i in range(1, 31)])
    assert len(many["kernels"]) == 20 and "k30" in many["kernels"] and "k1" not in many["kernels"]
    assert kernel_share([])["own_share"] == 0.0


def test_own_names_match_whole_words_of_a_kernel_name():
    assert is_own("_layernorm_backward", ["_layernorm_forward", "_layernorm_backward"])
    assert is_own("void my_kernel<float>(float*)", ["my_kernel"])
    assert not is_own("my_kernel_v2", ["my_kernel"])
    assert not is_own("anything", [""])


def test_a_training_step_splits_its_kernels_between_the_forward_and_the_backward():
    share = training_share(_step([_kernel("_layernorm_backward", 205, 30),
                                  _kernel("Memset (Device)", 236, 2, "gpu_memset"),
                                  _kernel("after_the_spans", 300, 100)]),
                           ["_layernorm_forward", "_layernorm_backward"])
    assert share["total_us"] == pytest.approx(42.0)  # the warm step's kernels are left out
    assert share["own_share"] == pytest.approx(40 / 42)
    backward = share["backward"]
    assert set(backward["kernels"]) == {"_layernorm_backward", "Memset (Device)"}
    assert backward["own_share"] == pytest.approx(30 / 32)
    assert share["steps"] == 1


def test_a_backward_of_pytorchs_ops_has_no_own_kernel_and_says_so():
    training = training_share(_step([_kernel("native_layer_norm_backward_kernel", 205, 30)]),
                              ["_layernorm_forward"])
    training.update(profiled_steps=3, launched=0)
    assert training["own_share"] == pytest.approx(10 / 40)
    assert unrecorded_training_note(training) is None  # the profile stands
    message = no_own_backward(training)
    assert message is not None
    assert "none of the candidate's kernels run during the backward of 3 profiled training" \
        in message
    assert "backward kernels seen: native_layer_norm_backward_kernel" in message
    assert "ghost_backward" in REASONS  # the reason it gets: no own kernel during backward
    own = training_share(_step([_kernel("_layernorm_backward", 205, 30)]),
                         ["_layernorm_backward"])
    assert no_own_backward(own) is None


def test_a_training_profile_that_lost_its_records_is_unknown_never_a_failure():
    lost = training_share(_step([_kernel("elementwise_kernel", 205, 3)]), ["_layernorm_backward"])
    lost.update(profiled_steps=3, launched=6)
    note = unrecorded_training_note(lost)
    assert note and "none of the candidate's 6 Triton launch(es) during the backward of 3" in note
    copies = training_share(_step([_kernel("Memcpy DtoD (Device -> Device)", 205, 3,
                                           "gpu_memcpy")]), ["_layernorm_backward"])
    assert "recorded no kernel in the backward of 1 profiled" in unrecorded_training_note(copies)
    failed = {"error": "RuntimeError: CUDA error"}
    assert unrecorded_training_note(failed) == ("training step not profiled (RuntimeError: CUDA "
                                                "error): its own kernel share unknown")


def _training() -> dict:
    return {"own_share": 0.88, "own_us": 88.0, "total_us": 100.0,
            "kernels": {"_layernorm_forward": {"us": 40.0, "own": True},
                        "_layernorm_backward": {"us": 48.0, "own": True},
                        "fill_kernel": {"us": 12.0, "own": False}},
            "backward": {"own_share": 0.8, "own_us": 48.0, "total_us": 60.0,
                         "kernels": {"_layernorm_backward": {"us": 48.0, "own": True},
                                     "fill_kernel": {"us": 12.0, "own": False}}},
            "profiled_steps": 1, "launched": 2}


def test_the_note_gives_the_training_steps_share_and_the_backwards_kernels():
    share = {"own_share": 0.92, "kernels": {"_layernorm_forward": {"us": 46.0, "own": True},
                                            "fill_kernel": {"us": 4.0, "own": False}}}
    assert kernel_time_note(share, _training()) == (
        "own kernels: 92% of GPU kernel time (training step: 88%); by time: "
        "_layernorm_forward* 46.0 us, fill_kernel 4.0 us; backward: 80% own, by time: "
        "_layernorm_backward* 48.0 us, fill_kernel 12.0 us")
    assert kernel_time_note(share) == ("own kernels: 92% of GPU kernel time; by time: "
                                       "_layernorm_forward* 46.0 us, fill_kernel 4.0 us")
    assert training_time_note(_training(), top=1) == (
        "own kernels in the training step: 88% of GPU kernel time; backward: 80% own, by "
        "time: _layernorm_backward* 48.0 us and 1 more")


def _stats(median_ms: float) -> dict:
    return {"median_ms": median_ms, "iqr_ms": 0.0, "min_ms": median_ms, "samples": 10,
            "method": "events", "mean_ms": median_ms}


def _timed(share: dict, backend: str = "triton"):
    timing = Timing(measures={measure: {"candidate_0": _stats(1.0), "eager": _stats(2.0)}
                              for measure in ("gpu", "call", "train_gpu", "train_call")},
                    shares={"0": share})
    judge = SimpleNamespace(config=EvalConfig())
    state = SimpleNamespace(timing=timing, reference=SimpleNamespace(bytes_moved=0, flops=0,
                                                                    peak_bytes=0))
    return outcome._timed(verdict_for("passed"), state, judge, 0,
                          SimpleNamespace(backend=backend))


_FORWARD = {"own_share": 0.92, "own_us": 46.0, "total_us": 50.0, "profiled_calls": 1,
            "launched": 2, "kernels": {"_layernorm_forward": {"us": 46.0, "own": True},
                                       "fill_kernel": {"us": 4.0, "own": False}}}


def test_a_verdict_carries_the_training_steps_share_in_its_note():
    verdict = _timed({**_FORWARD, "training": _training()})
    assert verdict.reason == "passed"
    assert any(n.startswith("own kernels: 92% of GPU kernel time (training step: 88%)")
               and "backward: 80% own" in n for n in verdict.notes)


def test_a_backward_with_no_own_kernel_is_a_ghost_backward():
    training = {**_training(), "own_share": 0.4, "profiled_steps": 3, "launched": 0,
                "backward": {"own_share": 0.0, "own_us": 0.0, "total_us": 60.0, "kernels": {
                    "layer_norm_grad_input_kernel": {"us": 60.0, "own": False}}}}
    verdict = _timed({**_FORWARD, "training": training})
    assert verdict.reason == "ghost_backward"
    assert "backward kernels seen: layer_norm_grad_input_kernel" in verdict.message
    # a baseline (no kernel of its own claimed) is told, not failed
    assert _timed({**_FORWARD, "training": training}, "pytorch").reason == "passed"


def test_an_unknown_training_profile_is_a_note_and_the_forwards_note_stands():
    training = {"error": "RuntimeError: out of memory"}
    verdict = _timed({**_FORWARD, "training": training})
    assert verdict.reason == "passed"
    assert any(n.startswith("training step not profiled") for n in verdict.notes)
    assert any(n.startswith("own kernels: 92% of GPU kernel time; by time") for n in verdict.notes)
    lost = {**_FORWARD, "own_us": 0.0, "launched": 6, "training": _training()}
    verdict = _timed(lost)  # the forward lost its records, the training step did not
    assert verdict.reason == "passed"
    assert any(n.startswith("own kernels in the training step: 88%") for n in verdict.notes)


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def test_a_training_step_profiled_on_the_cpu_sees_its_backwards_operators():
    torch.manual_seed(0)
    inputs = [torch.randn(4, 16)]
    share = training_step_share(_Small(), ["mm", "threshold_backward"], inputs, seed=7,
                                device="cpu")
    assert share["profiled_steps"] == 1 and share["launched"] == 0 and share["steps"] == 1
    backward = share["backward"]
    assert backward["own_us"] > 0
    assert any(entry["own"] and "mm" in name for name, entry in backward["kernels"].items())
    assert share["total_us"] > backward["total_us"]  # the forward with grad counts in the step
    none = training_step_share(_Small(), ["no_such_kernel"], inputs, seed=7, attempts=2,
                               device="cpu")
    assert none["profiled_steps"] == 2 and none["backward"]["own_us"] == 0  # tried again


def test_a_training_step_that_cannot_be_profiled_is_an_error_entry():
    class _NoGraph(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.detach() * 2

    share = training_step_share(_NoGraph(), ["k"], [torch.randn(3)], seed=1, device="cpu")
    assert share == {"error": "ValueError: no floating output carries a gradient function"}


def test_own_names_include_kernels_kept_on_the_candidates_classes(tmp_path):
    import importlib.util

    from kernelevo.evaluate.child.worker_timing import _own_kernel_names

    path = tmp_path / "kernels_on_classes.py"
    path.write_text(
        "import triton\n"
        "from torch.autograd import Function\n\n"
        "@triton.jit\ndef forward_kernel(x):\n    pass\n\n"
        "class _Norm(Function):\n"
        "    @staticmethod\n    @triton.jit\n    def backward_kernel(x):\n        pass\n")
    spec = importlib.util.spec_from_file_location("kernels_on_classes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = _own_kernel_names(module, path.read_text())
    assert {"forward_kernel", "backward_kernel"} <= names
    assert not any(name in names for name in ("apply", "forward", "backward"))  # Function's own
