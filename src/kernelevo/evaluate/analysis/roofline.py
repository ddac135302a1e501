"""Where a measured time sits on a GPU's roofline, and how much faster it could get.

Peaks are the vendors' dense (no sparsity) spec-sheet figures:
- H200 SXM: NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/)
- H100 SXM, PCIe, NVL: NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/)
- A100 40GB, 80GB PCIe, 80GB SXM: NVIDIA A100 Tensor Core GPU datasheet
  (nvidia.com/en-us/data-center/a100/)
- L40S: NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s/)
- GeForce RTX 4090: NVIDIA Ada Lovelace GPU architecture whitepaper, appendix table
  (FP16/BF16 tensor rate with FP32 accumulate, as PyTorch and Triton accumulate)
The datasheets print tensor rates "with sparsity"; the dense rate is half of it.
A GPU not in the table gets no roofline: a made-up peak would mislead the search.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    """One GPU's ceilings: HBM bandwidth and dense compute rates."""

    name: str
    hbm_gbps: float
    fp32_tflops: float  # CUDA cores, no tensor cores
    tf32_tflops: float
    bf16_tflops: float
    fp16_tflops: float

    def tensor_tflops(self, dtype_name: str) -> float:
        """The matrix-unit ceiling for a task's dtype (fp32 work may run as TF32)."""
        return {"float16": self.fp16_tflops, "bfloat16": self.bf16_tflops}.get(
            dtype_name, self.tf32_tflops)


# (fragments that must all appear in the device name, peaks); the first match wins,
# so a specific variant precedes the family's default.
PEAK_TABLE: tuple[tuple[tuple[str, ...], Peaks], ...] = (
    (("h200",), Peaks("H200 SXM", 4800, 67, 494.5, 989.5, 989.5)),
    (("h100", "pcie"), Peaks("H100 PCIe", 2000, 51, 378, 756.5, 756.5)),
    (("h100", "nvl"), Peaks("H100 NVL", 3900, 60, 417.5, 835.5, 835.5)),
    (("h100",), Peaks("H100 SXM", 3350, 67, 494.5, 989.5, 989.5)),
    (("a100", "80gb", "pcie"), Peaks("A100 80GB PCIe", 1935, 19.5, 156, 312, 312)),
    (("a100", "80gb"), Peaks("A100 80GB SXM", 2039, 19.5, 156, 312, 312)),
    (("a100",), Peaks("A100 40GB", 1555, 19.5, 156, 312, 312)),
    (("l40s",), Peaks("L40S", 864, 91.6, 183, 362, 362)),
    (("rtx 4090",), Peaks("GeForce RTX 4090", 1008, 82.6, 82.6, 165.2, 165.2)),
)


def peaks_for(device_name: str) -> Peaks | None:
    """The peaks of a GPU by its torch device name, or None when it is not in the table."""
    lowered = device_name.lower()
    for fragments, peaks in PEAK_TABLE:
        if all(fragment in lowered for fragment in fragments):
            return peaks
    return None


@dataclass(frozen=True)
class Roofline:
    """A measured time against the GPU's ceilings; fractions are of the peak (0..1)."""

    device: str
    time_ms: float
    bytes_moved: int
    flops: int
    achieved_gbps: float
    achieved_tflops: float
    memory_fraction: float  # achieved bandwidth / HBM peak
    compute_fraction: float  # compute floor / measured time (matmul and other FLOPs)
    bound: str  # "memory" or "compute": the ceiling nearer to the measured time
    fraction: float  # of the bounding ceiling
    peak_gbps: float
    peak_tflops: float  # the effective compute ceiling for this mix of FLOPs

    @property
    def headroom(self) -> float:
        """At most this many times faster before the bounding ceiling is reached."""
        return 1.0 / self.fraction if self.fraction > 0 else float("inf")

    def sentence(self) -> str:
        """e.g. 'memory-bound at 41 % of HBM peak: at most 2.4x left'."""
        ceiling = "HBM peak" if self.bound == "memory" else "compute peak"
        return (f"{self.bound}-bound at {self.fraction * 100:.0f} % of {ceiling}: "
                f"at most {self.headroom:.1f}x left")


def roofline(time_ms: float, bytes_moved: int, matmul_flops: int, other_flops: int,
             device_name: str, dtype_name: str) -> Roofline | None:
    """The roofline position of one call, or None for a GPU without known peaks."""
    peaks = peaks_for(device_name)
    if peaks is None or time_ms <= 0:
        return None
    seconds = time_ms / 1e3
    memory_s = bytes_moved / (peaks.hbm_gbps * 1e9)
    # Two compute ceilings: matmuls on the matrix units, everything else on CUDA cores.
    compute_s = (matmul_flops / (peaks.tensor_tflops(dtype_name) * 1e12)
                 + other_flops / (peaks.fp32_tflops * 1e12))
    flops = matmul_flops + other_flops
    memory_fraction, compute_fraction = memory_s / seconds, compute_s / seconds
    bound = "memory" if memory_s >= compute_s else "compute"
    return Roofline(
        device=device_name, time_ms=time_ms, bytes_moved=bytes_moved, flops=flops,
        achieved_gbps=bytes_moved / seconds / 1e9, achieved_tflops=flops / seconds / 1e12,
        memory_fraction=memory_fraction, compute_fraction=compute_fraction, bound=bound,
        fraction=max(memory_fraction, compute_fraction), peak_gbps=peaks.hbm_gbps,
        peak_tflops=flops / compute_s / 1e12 if compute_s > 0 else peaks.fp32_tflops)


def unknown_device_note(device_name: str) -> str:
    """What the profile says instead of a roofline on a GPU missing from the table."""
    return (f"roofline unknown: no peak figures for {device_name or 'this device'} "
            "(evaluate/analysis/roofline.py PEAK_TABLE)")
