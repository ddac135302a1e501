"""The guard an exported shape-specialised kernel carries: other shapes raise, never compute.

A kernel that refused other sizes when judged was verified at the task's
shapes only. Exported as a drop-in module it must keep refusing, so the day a
user's batch size changes they get an error that says so instead of numbers
nobody checked. The guard reads the shapes from the task's own `get_inputs`
on the meta device (no memory, no compute), once, at the first call.
"""

from __future__ import annotations

from kernelevo.evaluate.verdict import SPECIALISED_FLAG

GUARD_SOURCE = '''

# Shape guard: this kernel was verified at the task's input shapes only and
# refused others when judged, so other shapes raise here.
_VERIFIED_SHAPES = None
_unguarded_forward = ModelNew.forward


def _verified_shapes():
    global _VERIFIED_SHAPES
    if _VERIFIED_SHAPES is None:
        with torch.device("meta"):
            _VERIFIED_SHAPES = [tuple(value.shape) for value in get_inputs()
                                if isinstance(value, torch.Tensor)]
    return _VERIFIED_SHAPES


def _guarded_forward(self, *args, **kwargs):
    given = [tuple(value.shape) for value in args if isinstance(value, torch.Tensor)]
    if given != _verified_shapes():
        raise ValueError(f"this kernel is specialised to input shapes {_verified_shapes()} "
                         f"and was given {given}: call the reference model for other shapes")
    return _unguarded_forward(self, *args, **kwargs)


ModelNew.forward = _guarded_forward
'''


def needs_guard(flags: tuple[str, ...] | list[str]) -> bool:
    """Whether a verdict's flags mark a kernel specialised to the task's sizes."""
    return SPECIALISED_FLAG in flags
