"""Kernel breakdowns from profiler traces, diagnoses from them, and the profile record."""

from __future__ import annotations

import json

import pytest
import torch

from kernelevo.evaluate.analysis.profile import (CALL_ANNOTATION, NO_GPU_NOTE, Cost, Profile,
                                                 TraceEvent, breakdown, build_profile, diagnose,
                                                 events_from_chrome_trace, prompt_lines)
from kernelevo.evaluate.child.profile_take import take_breakdown


def _call(start: float, duration: float) -> TraceEvent:
    return TraceEvent(CALL_ANNOTATION, "user_annotation", start, duration)


def _kernel(name: str, start: float, duration: float) -> TraceEvent:
    return TraceEvent(name, "kernel", start, duration, (128, 1, 1), (256, 1, 1), 32, 0)


def _two_calls() -> list[TraceEvent]:
    # two calls of 20 us; each runs a 10 us own kernel and a 4 us copy kernel
    return [_call(0, 20), _kernel("softmax_kernel", 2, 10), _kernel("copy_kernel", 13, 4),
            _call(100, 20), _kernel("softmax_kernel", 102, 10), _kernel("copy_kernel", 113, 4),
            _kernel("before_the_calls", -50, 30)]


def test_breakdown_gives_shares_launches_and_time_outside_kernels_per_call():
    parts = breakdown(_two_calls(), own_names=("softmax_kernel",))
    assert parts.calls == 2
    assert [row.name for row in parts.kernels] == ["softmax_kernel", "copy_kernel"]
    first = parts.kernels[0]
    assert first.share == pytest.approx(10 / 14)
    assert (first.us_per_call, first.launches_per_call, first.own) == (10, 1, True)
    assert (first.grid, first.block, first.registers) == ((128, 1, 1), (256, 1, 1), 32)
    assert parts.kernels[1].own is False
    assert parts.kernel_us_per_call == pytest.approx(14)
    assert parts.outside_us_per_call == pytest.approx(6)


def test_overlapping_kernels_count_their_busy_time_once():
    events = [_call(0, 10), _kernel("a", 0, 6), _kernel("b", 4, 4)]
    parts = breakdown(events)
    assert parts.kernel_us_per_call == pytest.approx(8)
    assert parts.outside_us_per_call == pytest.approx(2)


def test_chrome_trace_events_keep_grid_block_registers_and_shared_memory():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 5.0, "dur": 2.5,
         "args": {"grid": [4, 2, 1], "block": [128, 1, 1], "registers per thread": 40,
                  "shared memory": 1024}},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1.0},
    ]}
    (event,) = events_from_chrome_trace(trace)
    assert (event.grid, event.block, event.registers, event.shared_bytes) == (
        (4, 2, 1), (128, 1, 1), 40, 1024)


def test_a_recorded_cpu_profile_stands_in_for_kernels():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    parts = take_breakdown(model, [torch.randn(4, 16)], own_names=("addmm",), calls=3,
                           device="cpu")
    names = {row.name for row in parts.kernels}
    assert {"aten::addmm", "aten::relu"} <= names
    assert parts.calls == 3
    addmm = next(row for row in parts.kernels if row.name == "aten::addmm")
    assert addmm.launches_per_call == 1 and addmm.own
    assert parts.kernel_us_per_call > 0


def test_many_launches_with_most_time_outside_kernels_is_launch_bound():
    events = [_call(0, 100)] + [_kernel(f"k{i}", 10 * i, 5) for i in range(5)]
    line = diagnose(breakdown(events), None, {"compile": 1.0})
    assert line.startswith("launch-bound: 75 % of a call (75.0 of 100.0 us) is outside kernels")
    assert line.endswith("; 5 kernels where the reference fuses to 1 under torch.compile")


def test_profile_without_a_known_gpu_says_so_and_diagnoses_from_the_trace_only():
    profile = build_profile(breakdown(_two_calls()), Cost(100, 0, 10), 0.02, "NVIDIA T4",
                            "float32")
    assert profile.roofline is None
    assert any("no peak figures for NVIDIA T4" in note for note in profile.notes)


def test_profile_without_a_trace_says_no_gpu():
    profile = build_profile(None, Cost(100, 0, 10), None, "", "float32")
    assert NO_GPU_NOTE in profile.notes and profile.diagnosis == ""


def test_profile_round_trips_through_json():
    profile = build_profile(breakdown(_two_calls(), ("softmax_kernel",)),
                            Cost(2 * 4096 * 16384 * 4, 0, 5 * 4096 * 16384), 0.5,
                            "NVIDIA H200", "float32", {"eager": 3.0, "compile": 1.0})
    again = Profile.from_dict(json.loads(json.dumps(profile.to_dict())))
    assert again == profile
    assert again.bound == "memory"
    assert "softmax_kernel (own): 71 %" in "\n".join(prompt_lines(again))


def test_attach_profiles_adds_each_candidates_profile_to_its_share():
    import types

    from kernelevo.evaluate.child.profile_take import attach_profiles
    from kernelevo.evaluate.verdict import TimingStats

    task = types.ModuleType("relu_task")
    exec("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
         "        return torch.relu(x)\ndef get_inputs():\n    return [torch.randn(64, 32)]\n"
         "def get_init_inputs():\n    return []\n", task.__dict__)
    candidate = torch.nn.Sequential(torch.nn.ReLU())
    shares = {"0": {"own_names": ["relu"]}}
    time_ms = 64 * 32 * 4 * 2 / (0.5 * 4800e9) * 1e3  # half the H200's HBM peak
    attach_profiles(shares, {0: (candidate, None, None)}, {"eager": task.Model()}, task,
                    [torch.randn(64, 32)], {"gpu": {"candidate_0": TimingStats(time_ms, 0, 0, 1)}},
                    "NVIDIA H200", "float32", device="cpu")
    profile = Profile.from_dict(shares["0"]["profile"])
    assert profile.cost == Cost(64 * 32 * 4 * 2, 0, 64 * 32, "meta")
    assert profile.roofline.bound == "memory"
    assert profile.roofline.fraction == pytest.approx(0.5)
    assert any(row.name == "aten::relu" and row.own for row in profile.breakdown.kernels)
    assert profile.baseline_launches["eager"] >= 1
