"""Output comparison: one function decides closeness for eval, compare and evolve.

An element passes when |out - ref| <= atol * scale + rtol * |ref|, where
scale = max(1, rms(ref)): the absolute term follows the output's magnitude so
honest reorderings of long fp32 sums pass while TF32 or half-precision
shortcuts do not. The whole tensor must also have a relative L2 error of at
most rtol. NaN or Inf must match the reference exactly, never stand in for a
finite value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelevo.evaluate.verdict import ErrorMetrics


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing one output tensor; reason is None when it passes."""

    reason: str | None
    message: str
    metrics: ErrorMetrics | None


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
                   label: str = "output") -> Comparison:
    """Compare one candidate output with the reference output."""
    if type(out) is not torch.Tensor:
        return Comparison("not_a_tensor", f"{label} is {type(out).__name__}, not torch.Tensor", None)
    if out.shape != ref.shape:
        return Comparison("wrong_shape", f"{label} has shape {tuple(out.shape)}, "
                          f"expected {tuple(ref.shape)}", None)
    if out.dtype != ref.dtype:
        return Comparison("wrong_dtype", f"{label} has dtype {out.dtype}, expected {ref.dtype}", None)
    if ref.dtype == torch.bool or not ref.is_floating_point():
        return _compare_exact(out, ref, label)
    return _compare_float(out, ref, atol, rtol, label)


def _compare_exact(out: torch.Tensor, ref: torch.Tensor, label: str) -> Comparison:
    wrong = out != ref
    fraction = wrong.float().mean().item() if ref.numel() else 0.0
    metrics = ErrorMetrics(0.0 if not fraction else 1.0, 0.0, fraction, 0.0)
    if fraction:
        return Comparison("output_mismatch", f"{label}: {fraction:.2%} of integer values differ",
                          metrics)
    return Comparison(None, "", metrics)


def _compare_float(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
                   label: str) -> Comparison:
    out64, ref64 = out.double(), ref.double()
    ref_finite = torch.isfinite(ref64)
    same_special = (out64 == ref64) | (torch.isnan(out64) & torch.isnan(ref64))
    bad_special = (~ref_finite & ~same_special) | (ref_finite & ~torch.isfinite(out64))
    if bad_special.any():
        count = int(bad_special.sum())
        index = _first_index(bad_special)
        return Comparison("non_finite", f"{label}: {count} NaN/Inf values where the reference "
                          f"differs (first at {index}: got {out64[index].item()}, "
                          f"expected {ref64[index].item()})", None)
    diff = torch.where(ref_finite, (out64 - ref64).abs(), torch.zeros_like(ref64))
    finite_ref = torch.where(ref_finite, ref64, torch.zeros_like(ref64))
    rms = finite_ref.square().mean().sqrt().item() if ref.numel() else 0.0
    allowed = atol * max(1.0, rms) + rtol * finite_ref.abs()
    failing = diff > allowed
    metrics = _metrics(diff, finite_ref, out64, failing, atol, rtol)
    if failing.any() or metrics.rel_l2_error > rtol:
        return Comparison("output_mismatch", _mismatch_message(label, metrics), metrics)
    return Comparison(None, "", metrics)


def _metrics(diff: torch.Tensor, ref: torch.Tensor, out: torch.Tensor, failing: torch.Tensor,
             atol: float, rtol: float) -> ErrorMetrics:
    if diff.numel() == 0:
        return ErrorMetrics(0.0, 0.0, 0.0, 0.0, atol=atol, rtol=rtol)
    rel = diff / ref.abs().clamp_min(1e-12)
    worst = _first_index(diff == diff.max())
    ref_norm = ref.norm().item()
    rel_l2 = diff.norm().item() / ref_norm if ref_norm > 0 else diff.norm().item()
    return ErrorMetrics(
        max_abs_error=diff.max().item(),
        max_rel_error=rel[ref.abs() > 0].max().item() if (ref.abs() > 0).any() else 0.0,
        mismatch_fraction=failing.double().mean().item(),
        rel_l2_error=rel_l2,
        worst_index=worst,
        worst_value=out[worst].item(),
        worst_expected=ref[worst].item(),
        atol=atol,
        rtol=rtol,
    )


def _first_index(mask: torch.Tensor) -> tuple[int, ...]:
    flat = int(torch.nonzero(mask.reshape(-1))[0]) if mask.any() else 0
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape)) \
        if mask.dim() else ()


def _mismatch_message(label: str, m: ErrorMetrics) -> str:
    return (f"{label}: {m.mismatch_fraction:.2%} of elements beyond tolerance "
            f"(atol {m.atol:g}, rtol {m.rtol:g}); max abs error {m.max_abs_error:.3g} "
            f"at index {list(m.worst_index)} (got {m.worst_value:.6g}, expected {m.worst_expected:.6g}); "
            f"relative L2 error {m.rel_l2_error:.3g}")


def worst_of(metrics: list[ErrorMetrics]) -> ErrorMetrics | None:
    """The metrics with the largest relative L2 error (what a repair should look at)."""
    present = [m for m in metrics if m is not None]
    return max(present, key=lambda m: (m.mismatch_fraction, m.rel_l2_error), default=None)
