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
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    where = torch.device(device) if device is not None else ref.device

    def chunks(start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (flat_out[start:stop].to(where).double(), flat_ref[start:stop].to(where).double())

    numel = flat_ref.numel()
    step = _chunk_elements.get() or CHUNK_ELEMENTS
    spans = [(start, min(start + step, numel)) for start in range(0, numel, step)]
    # First pass: NaN or Inf where the reference has none (or another), and rms(ref).
    bad_count, bad_first, ref_squares = 0, None, 0.0
    for start, stop in spans:
        out64, ref64 = chunks(start, stop)
        ref_finite = torch.isfinite(ref64)
        same_special = (out64 == ref64) | (torch.isnan(out64) & torch.isnan(ref64))
        bad_special = (~ref_finite & ~same_special) | (ref_finite & ~torch.isfinite(out64))
        count = int(bad_special.sum())
        if count and bad_first is None:
            bad_first = start + int(torch.nonzero(bad_special)[0])
        bad_count += count
        ref_squares += float(torch.where(ref_finite, ref64, 0.0).square().sum())
    if bad_first is not None:
        index = _unravel(bad_first, ref.shape)
        return Comparison("non_finite", f"{label}: {bad_count} NaN/Inf values where the "
                          f"reference differs (first at {index}: got "
                          f"{flat_out[bad_first].double().item()}, expected "
                          f"{flat_ref[bad_first].double().item()})", None)
    if numel == 0:
        return Comparison(None, "", ErrorMetrics(0.0, 0.0, 0.0, 0.0, atol=atol, rtol=rtol))
    rms = (ref_squares / numel) ** 0.5
    # Second pass: each element against its allowance, and the error's measures.
    failing_count, diff_squares, max_rel = 0, 0.0, 0.0
    max_abs, worst = -1.0, 0
    for start, stop in spans:
        out64, ref64 = chunks(start, stop)
        ref_finite = torch.isfinite(ref64)
        diff = torch.where(ref_finite, (out64 - ref64).abs(), 0.0)
        finite_ref = torch.where(ref_finite, ref64, 0.0)
        magnitude = finite_ref.abs()
        failing_count += int((diff > atol * max(1.0, rms) + rtol * magnitude).sum())
        diff_squares += float(diff.square().sum())
        largest = float(diff.max())
        if largest > max_abs:  # the first element holding the largest error, as argmax's first
            max_abs, worst = largest, start + int(torch.nonzero(diff == largest)[0])
        nonzero = magnitude > 0
        if bool(nonzero.any()):
            max_rel = max(max_rel, float((diff[nonzero] / magnitude[nonzero].clamp_min(1e-12))
                                         .max()))
    ref_norm = ref_squares ** 0.5
    rel_l2 = diff_squares ** 0.5 / ref_norm if ref_norm > 0 else diff_squares ** 0.5
    worst_expected = flat_ref[worst].double().item()
    metrics = ErrorMetrics(
        max_abs_error=max_abs, max_rel_error=max_rel,
        mismatch_fraction=failing_count / numel, rel_l2_error=rel_l2,
        worst_index=_unravel(worst, ref.shape), worst_value=flat_out[worst].double().item(),
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
