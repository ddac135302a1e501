"""The physical floor: no correct kernel runs faster than its bytes or FLOPs allow.

Rates are datasheet peaks (upper bounds), so the floor is a lower bound on
time; a measured time under it means the measurement or the candidate lies.
"""

from __future__ import annotations

from dataclasses import dataclass

# name fragment -> (bytes/s of HBM, FLOP/s for fp16/bf16 dense, FLOP/s for fp32 work)
# fp32 work is bounded by the TF32 tensor-core rate: error-compensated TF32
# schemes can pass fp32 tolerances, so the plain FP32 rate is no safe bound.
DEVICE_PEAKS = {
    "H200": (4.8e12, 989e12, 494e12),
    "H100": (3.35e12, 989e12, 494e12),
    "A100": (2.039e12, 312e12, 156e12),
    "L40S": (0.864e12, 362e12, 183e12),
}


@dataclass(frozen=True)
class Floor:
    """The lower bound on runtime and what it came from."""

    bytes_moved: int
    flops: int
    floor_ms: float
    bound: str  # "memory" or "compute"
    device: str


def device_peaks(device_name: str) -> tuple[float, float, float] | None:
    for fragment, peaks in DEVICE_PEAKS.items():
        if fragment in device_name:
            return peaks
    return None


def compute_floor(bytes_moved: int, flops: int, device_name: str, dtype_name: str) -> Floor | None:
    """The floor for a task on a device, or None when the device's peaks are unknown."""
    peaks = device_peaks(device_name)
    if peaks is None:
        return None
    bandwidth, half_rate, fp32_rate = peaks
    rate = fp32_rate if dtype_name in ("float32", "float64") else half_rate
    memory_ms = bytes_moved / bandwidth * 1e3
    compute_ms = flops / rate * 1e3
    bound = "memory" if memory_ms >= compute_ms else "compute"
    return Floor(bytes_moved, flops, max(memory_ms, compute_ms), bound, device_name)
