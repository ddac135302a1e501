"""The tolerances a convolution task's timed outputs are re-checked at: eager's own TF32 error.

A candidate is verified with cuDNN's TF32 off and timed under PyTorch's
defaults, where it is on for fp32 convolutions; its timed outputs then differ
from its verified ones by TF32's rounding (10 mantissa bits) carried through
whatever follows the convolution. How far that goes depends on the task (an
epilogue can amplify it), so it is measured on the task's eager reference,
run once with TF32 off and once on, per input set the timed calls see.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from kernelevo.evaluate.analysis.oom import is_out_of_memory
from kernelevo.evaluate.shared import inputs as task_inputs

# The floor of both tolerances, the fixed rule before this measure: a task
# whose eager TF32 error is small keeps it, so nothing that passed before
# fails now. A candidate's own convolution need not match eager's algorithm
# (another cuDNN kernel, its own tiling), and its TF32 error lands at other
# elements than eager's: eager's error measures the scale, not the bound.
TF32_FLOOR = 1e-2
# Timed outputs may differ from the verified ones by this many times eager's error.
TF32_FACTOR = 3.0


def fixed_rule(tolerances: Sequence[Sequence[float]]) -> list[list[float]]:
    """The TF32 floor on every output's (atol, rtol)."""
    return [[max(atol, TF32_FLOOR), max(rtol, TF32_FLOOR)] for atol, rtol in tolerances]


def tf32_tolerances(eager: Any, sets: Sequence[Sequence[Any]],
                    tolerances: Sequence[Sequence[float]]) -> tuple[list[list[float]], str]:
    """Each output's (atol, rtol) for timed outputs, and a note saying what they are.

    rtol is the task's, at least TF32_FLOOR. atol is at least the task's and
    TF32_FLOOR, and TF32_FACTOR times the worst error of eager's TF32 output
    (against its fp32 one, on every set) that this rtol leaves uncovered, in
    compare_tensor's units (its atol is scaled by max(1, rms of the reference)).
    Outputs not measurable (not floating, shapes differ) keep the fixed rule;
    so do all when eager fails (out of memory), with the reason in the note.
    `sets` are not modified: eager runs on clones of them.
    """
    fixed = fixed_rule(tolerances)
    floor = f"timed outputs re-checked at atol, rtol >= {TF32_FLOOR:g}"
    failed, measured = "", {}
    try:
        measured = _uncovered_errors(eager, sets, [rtol for _, rtol in fixed])
    except Exception as exc:  # noqa: BLE001 - the fixed rule stands; timing goes on
        failed = ("out of memory" if is_out_of_memory(exc) else type(exc).__name__)
    if failed:  # out of the except: its traceback no longer holds eager's outputs
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return fixed, f"{floor}: eager's TF32 error not measured ({failed})"
    widened, raised = [], []
    for position, (atol, rtol) in enumerate(fixed):
        error = measured.get(position)
        wide = max(atol, TF32_FACTOR * error) if error is not None else atol
        if wide > atol:
            raised.append(f"atol {wide:.3g} (output {position})")
        widened.append([wide, rtol])
    if not raised:
        return widened, f"{floor} (eager's TF32 error x{TF32_FACTOR:g} is within them)"
    return widened, (f"timed outputs re-checked at eager's TF32 error x{TF32_FACTOR:g}: "
                     + ", ".join(raised[:4]) + (", ..." if len(raised) > 4 else ""))


def _uncovered_errors(eager: Any, sets: Sequence[Sequence[Any]],
                      rtols: Sequence[float]) -> dict[int, float]:
    """Output position -> eager's worst TF32 error beyond rtol, over all sets.

    A position missing from the answer could not be measured on some set.
    """
    errors: dict[int, float] = {}
    unmeasured: set[int] = set()
    restore = torch.backends.cudnn.allow_tf32
    try:
        with torch.no_grad():
            for values in sets:
                exact = _call(eager, values, tf32=False)
                fast = _call(eager, values, tf32=True)
                for position, rtol in enumerate(rtols):
                    error = (_uncovered(fast[position], exact[position], rtol)
                             if position < min(len(fast), len(exact)) else None)
                    if error is None:
                        unmeasured.add(position)
                    else:
                        errors[position] = max(errors.get(position, 0.0), error)
                del exact, fast  # freed before the next set's calls
    finally:
        torch.backends.cudnn.allow_tf32 = restore
    return {p: e for p, e in errors.items() if p not in unmeasured}


def _call(eager: Any, values: Sequence[Any], tf32: bool) -> list[Any]:
    torch.backends.cudnn.allow_tf32 = tf32
    given = task_inputs.clone_inputs(list(values))
    output = eager(*given)
    del given
    return task_inputs.flatten_outputs(output)[0]


def _uncovered(fast: Any, exact: Any, rtol: float) -> float | None:
    """max(|fast - exact| - rtol |exact|) over finite elements, over max(1, rms(exact)).

    compare_tensor's bound per element is atol * max(1, rms) + rtol * |ref|:
    an atol of this much covers the difference. None: not measurable.
    """
    if not (isinstance(fast, torch.Tensor) and isinstance(exact, torch.Tensor)
            and exact.is_floating_point() and fast.dtype == exact.dtype
            and fast.shape == exact.shape):
        return None
    if exact.numel() == 0:
        return 0.0
    fast, exact = fast.detach().float(), exact.detach().float()
    finite = torch.isfinite(exact) & torch.isfinite(fast)  # non-finite: no atol covers those
    exact = torch.where(finite, exact, torch.zeros((), dtype=exact.dtype, device=exact.device))
    rms = (torch.linalg.vector_norm(exact, dtype=torch.float64) / exact.numel() ** 0.5).item()
    excess = (fast - exact).abs_().sub_(exact.abs().mul_(rtol))
    excess = excess.masked_fill_(~finite, 0.0)
    return max(0.0, excess.max().item()) / max(1.0, rms)
