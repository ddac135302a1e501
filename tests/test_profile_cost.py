"""Analytic bytes and FLOPs of the bundled examples, and roofline positions from them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from kernelevo.evaluate.analysis.cost import element_flops, model_cost, task_cost
from kernelevo.evaluate.analysis.roofline import peaks_for, roofline

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
F32 = 4


def _task(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / name / "task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Hand-computed: bytes = (inputs + outputs + parameters) elements x 4 bytes;
# FLOPs by the documented rule (cost.py).
_N = 8192 * 8192
HAND = {
    # x in, y out; 5 FLOPs per element (max, subtract, exp, sum, divide)
    "softmax": (2 * 4096 * 16384 * F32, 0, 5 * 4096 * 16384),
    # one pointwise op: 1 FLOP per output element
    "gelu": (2 * _N * F32, 0, _N),
    # x, y, weight and bias of 8192; 7 FLOPs per input element
    "layernorm": ((2 * _N + 2 * 8192) * F32, 0, 7 * _N),
    # two inputs, a scalar out; subtract, square (per output element), mean (per input)
    "mse_loss": ((2 * _N + 1) * F32, 0, 3 * _N),
    # x in, a row of 8192 sums out; 1 FLOP per input element
    "row_sum": ((8192 * 16384 + 8192) * F32, 0, 8192 * 16384),
    # x, W (4096x4096), b, y; 2*M*N*K for the matmul, relu 1 per output element
    "gemm_bias_relu": ((3 * 4096 * 4096 + 4096) * F32, 2 * 4096 ** 3, 4096 * 4096),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_bundled_example_costs_equal_hand_computed_values(name):
    cost = task_cost(_task(name), torch.float32)
    assert (cost.bytes_moved, cost.matmul_flops, cost.other_flops) == HAND[name]
    assert cost.device == "meta"


def test_half_precision_halves_the_bytes_and_keeps_the_flops():
    single = task_cost(_task("gelu"), torch.float32)
    half = task_cost(_task("gelu"), torch.float16)
    assert half.bytes_moved * 2 == single.bytes_moved
    assert half.flops == single.flops


def test_in_place_ops_count_as_their_pointwise_op_and_views_count_nothing():
    x = torch.ones(3, 5)
    assert element_flops("relu_", (x,), x) == 15
    assert element_flops("view", (x,), x) == 0
    assert element_flops("sum", (x,), torch.ones(3)) == 15


def test_model_cost_counts_buffers_as_moved_bytes():
    model = torch.nn.BatchNorm1d(4).eval()  # weight, bias, running mean and var, a counter
    cost = model_cost(model, [torch.ones(2, 4)], "cpu")
    params = 4 * 4 * F32 + 8  # num_batches_tracked is int64
    assert cost.bytes_moved == 2 * 2 * 4 * F32 + params
    assert cost.other_flops == 7 * 8


def test_softmax_on_an_h200_reads_as_memory_bound_with_its_headroom():
    bytes_moved = 2 * 4096 * 16384 * F32
    time_ms = bytes_moved / (0.41 * 4800e9) * 1e3  # 41 % of 4.8 TB/s
    position = roofline(time_ms, bytes_moved, 0, 5 * 4096 * 16384, "NVIDIA H200", "float32")
    assert position.bound == "memory"
    assert position.achieved_gbps == pytest.approx(0.41 * 4800)
    assert position.sentence() == "memory-bound at 41 % of HBM peak: at most 2.4x left"


def test_a_large_gemm_is_compute_bound_against_the_tensor_rate_of_its_dtype():
    flops = 2 * 4096 ** 3
    position = roofline(1.0, 3 * 4096 * 4096 * 2, flops, 0, "NVIDIA H100 80GB HBM3", "bfloat16")
    assert position.bound == "compute"
    assert position.fraction == pytest.approx(flops / 1e-3 / 989.5e12)
    assert position.peak_tflops == pytest.approx(989.5)


def test_device_names_pick_the_variant_and_unknown_gpus_get_no_peaks():
    assert peaks_for("NVIDIA H100 PCIe").hbm_gbps == 2000
    assert peaks_for("NVIDIA A100-SXM4-80GB").hbm_gbps == 2039
    assert peaks_for("NVIDIA A100 80GB PCIe").hbm_gbps == 1935
    assert peaks_for("NVIDIA GeForce RTX 4090").bf16_tflops == 165.2
    assert peaks_for("NVIDIA L40S").fp16_tflops == 362
    assert peaks_for("NVIDIA T4") is None
    assert roofline(1.0, 10, 10, 10, "NVIDIA T4", "float32") is None
