"""Output comparison: one function decides closeness for eval, compare and evolve.

An element passes when |out - ref| <= atol * scale + rtol * |ref|, where
scale = max(1, rms(ref)): the absolute term follows the output's magnitude so
honest reorderings of long fp32 sums pass while TF32 or half-precision
shortcuts do not. The whole tensor must also have a relative L2 error of at
most rtol. NaN or Inf must match the reference exactly, never stand in for a
finite value.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

import torch

from kernelevo.evaluate.verdict import ErrorMetrics


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing one output tensor; reason is None when it passes."""

    reason: str | None
    message: str
    metrics: ErrorMetrics | None


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
                   label: str = "output", device: str | torch.device | None = None
                   ) -> Comparison:
    """Compare one candidate output with the reference output.

    With `device`, each chunk of both is moved there as it is compared: a
    reference kept on the CPU (the GPU was full when it came) is compared on
    the GPU without a whole copy of it there, and a candidate's output mapped
    from its worker's memory is read where it is.
    """
    if type(out) is not torch.Tensor:
        return Comparison("not_a_tensor", f"{label} is {type(out).__name__}, not torch.Tensor", None)
    if out.shape != ref.shape:
        return Comparison("wrong_shape", f"{label} has shape {tuple(out.shape)}, "
                          f"expected {tuple(ref.shape)}", None)
    if out.dtype != ref.dtype:
        return Comparison("wrong_dtype", f"{label} has dtype {out.dtype}, expected {ref.dtype}", None)
    if ref.dtype == torch.bool or not ref.is_floating_point():
        if device is not None:
            out, ref = out.to(device), ref.to(device)
        return _compare_exact(out, ref, label)
    return _compare_float(out, ref, atol, rtol, label, device)


def _compare_exact(out: torch.Tensor, ref: torch.Tensor, label: str) -> Comparison:
    wrong = out != ref
    fraction = wrong.float().mean().item() if ref.numel() else 0.0
    metrics = ErrorMetrics(0.0 if not fraction else 1.0, 0.0, fraction, 0.0)
    if fraction:
        return Comparison("output_mismatch", f"{label}: {fraction:.2%} of integer values differ",
                          metrics)
    return Comparison(None, "", metrics)


# Elements compared at once: the float64 passes of one chunk take about ten
# times its size in bytes (80 MB at 1M elements), whatever the output's size.
# Whole 1 GiB outputs compared at once took about 20 GiB in the judge's own
# process, which then held it in its cache: a candidate beside it ran out of
# memory (KernelBench level-2 26, a 1 GiB output, on an 80 GB H100).
CHUNK_ELEMENTS = 1 << 23
# Chunks of an eighth of that when the GPU is nearly full (`smaller_chunks`): 80 MB of
# float64 passes where the GPU's last gigabyte is shared by every lane of a suite.
SMALL_CHUNK_ELEMENTS = 1 << 20
_chunk_elements: ContextVar[int | None] = ContextVar("chunk_elements", default=None)


@contextmanager
def smaller_chunks(elements: int = SMALL_CHUNK_ELEMENTS) -> Iterator[None]:
    """Comparisons made in this thread meanwhile take `elements` at a time."""
    token = _chunk_elements.set(elements)
    try:
        yield
    finally:
        _chunk_elements.reset(token)


def _compare_float(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
                   label: str, device: str | torch.device | None = None) -> Comparison:
    """Two passes over the chunks, their sums and extremes kept on the comparing device.

    Each pass reads its totals back once, at its end: a value read back per
    chunk waits for the GPU each time, and on a GPU shared with a suite's
    other lanes each such wait can take a time slice of theirs (a 1.6 G
    element output is 192 chunks). The totals are the same float64 sums in
    the same order, so the figures are those of reading each chunk's back.
    """
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    where = torch.device(device) if device is not None else ref.device

    def chunks(start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (flat_out[start:stop].to(where).double(), flat_ref[start:stop].to(where).double())

    def zero(dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return torch.zeros((), dtype=dtype, device=where)

    numel = flat_ref.numel()
    step = _chunk_elements.get() or CHUNK_ELEMENTS
    spans = [(start, min(start + step, numel)) for start in range(0, numel, step)]
    # First pass: NaN or Inf where the reference has none (or another), and rms(ref).
    bad_count, bad_first, ref_squares = zero(torch.int64), zero(torch.int64) - 1, zero()
    for start, stop in spans:
        out64, ref64 = chunks(start, stop)
        ref_finite = torch.isfinite(ref64)
        same_special = (out64 == ref64) | (torch.isnan(out64) & torch.isnan(ref64))
        bad_special = (~ref_finite & ~same_special) | (ref_finite & ~torch.isfinite(out64))
        count = bad_special.sum()
        first_here = start + torch.argmax(bad_special.to(torch.uint8))  # its first True
        bad_first = torch.where((bad_first < 0) & (count > 0), first_here, bad_first)
        bad_count += count
        ref_squares += torch.where(ref_finite, ref64, 0.0).square().sum()
    # Counts and indices below 2**53 are exact in float64: one read for the three.
    count_read, first_read, ref_squares_read = torch.stack(
        [bad_count.double(), bad_first.double(), ref_squares]).tolist()
    if first_read >= 0:
        bad_at = int(first_read)
        index = _unravel(bad_at, ref.shape)
        return Comparison("non_finite", f"{label}: {int(count_read)} NaN/Inf values where the "
                          f"reference differs (first at {index}: got "
                          f"{flat_out[bad_at].double().item()}, expected "
                          f"{flat_ref[bad_at].double().item()})", None)
    if numel == 0:
        return Comparison(None, "", ErrorMetrics(0.0, 0.0, 0.0, 0.0, atol=atol, rtol=rtol))
    rms = (ref_squares_read / numel) ** 0.5
    allowance = atol * max(1.0, rms)
    # Second pass: each element against its allowance, and the error's measures.
    failing, diff_squares, max_rel = zero(torch.int64), zero(), zero()
    max_abs, worst = zero() - 1.0, zero(torch.int64)
    for start, stop in spans:
        out64, ref64 = chunks(start, stop)
        ref_finite = torch.isfinite(ref64)
        diff = torch.where(ref_finite, (out64 - ref64).abs(), 0.0)
        magnitude = torch.where(ref_finite, ref64, 0.0).abs()
        failing += (diff > allowance + rtol * magnitude).sum()
        diff_squares += diff.square().sum()
        largest = diff.max()
        # The first element holding the largest error: argmax gives a chunk's first, and a
        # later chunk takes over only with a larger one.
        larger = largest > max_abs
        worst = torch.where(larger, start + torch.argmax(diff), worst)
        max_abs = torch.where(larger, largest, max_abs)
        relative = torch.where(magnitude > 0, diff / magnitude.clamp_min(1e-12), 0.0)
        max_rel = torch.maximum(max_rel, relative.max())
    failing_read, diff_squares_read, max_rel_read, max_abs_read, worst_read = torch.stack(
        [failing.double(), diff_squares, max_rel, max_abs, worst.double()]).tolist()
    failing_count, worst_at = int(failing_read), int(worst_read)
    ref_norm = ref_squares_read ** 0.5
    rel_l2 = (diff_squares_read ** 0.5 / ref_norm if ref_norm > 0
              else diff_squares_read ** 0.5)
    worst_expected = flat_ref[worst_at].double().item()
    metrics = ErrorMetrics(
        max_abs_error=max_abs_read, max_rel_error=max_rel_read,
        mismatch_fraction=failing_count / numel, rel_l2_error=rel_l2,
        worst_index=_unravel(worst_at, ref.shape), worst_value=flat_out[worst_at].double().item(),
        worst_expected=worst_expected if worst_expected == worst_expected and abs(
            worst_expected) != float("inf") else 0.0,
        atol=atol, rtol=rtol)
    if failing_count or rel_l2 > rtol:
        return Comparison("output_mismatch", _mismatch_message(label, metrics), metrics)
    return Comparison(None, "", metrics)


def _unravel(flat: int, shape: torch.Size) -> tuple[int, ...]:
    """The index in `shape` of the `flat`-th element in row-major order."""
    index = []
    for size in reversed(shape):
        index.append(flat % size if size else 0)
        flat //= size if size else 1
    return tuple(reversed(index))


def _mismatch_message(label: str, m: ErrorMetrics) -> str:
    return (f"{label}: {m.mismatch_fraction:.2%} of elements beyond tolerance "
            f"(atol {m.atol:g}, rtol {m.rtol:g}); max abs error {m.max_abs_error:.3g} "
            f"at index {list(m.worst_index)} (got {m.worst_value:.6g}, expected {m.worst_expected:.6g}); "
            f"relative L2 error {m.rel_l2_error:.3g}")


def worst_of(metrics: list[ErrorMetrics]) -> ErrorMetrics | None:
    """The metrics with the largest relative L2 error (what a repair should look at)."""
    present = [m for m in metrics if m is not None]
    return max(present, key=lambda m: (m.mismatch_fraction, m.rel_l2_error), default=None)
