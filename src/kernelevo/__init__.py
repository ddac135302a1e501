"""KernelEvo: turn slow PyTorch code into fast, verified GPU kernels.

    import kernelevo
    verdict = kernelevo.evaluate("examples/softmax/task.py",
                                 "examples/softmax/triton_candidate.py")

evaluate, compare, evolve, export and apply (kernelevo.api, docs/api.md) load on
first use: `import kernelevo` imports neither torch nor the judge.
"""

from __future__ import annotations

import importlib
import inspect
import types
from typing import TYPE_CHECKING, Any

from kernelevo.version import __version__

__all__ = ["__version__", "apply", "compare", "evaluate", "evolve", "export"]

if TYPE_CHECKING:
    from kernelevo.api import apply, compare, evaluate, evolve, export  # noqa: F401

_LAZY = ("apply", "compare", "evolve", "export", "Exported")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("kernelevo.api"), name)
    raise AttributeError(f"module 'kernelevo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _EvaluatePackage(types.ModuleType):
    """The package kernelevo.evaluate, callable as kernelevo.api.evaluate.

    Python binds `kernelevo.evaluate` to the subpackage as soon as any module
    in it is imported, so a plain function of that name would be replaced;
    the package forwards calls instead, and `kernelevo.evaluate.parent.judge` and
    the like stay reachable.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from kernelevo.api import evaluate

        return evaluate(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        from kernelevo.api import evaluate

        return inspect.signature(evaluate)


# The subpackage has no __init__ of its own: importing it runs no code.
importlib.import_module("kernelevo.evaluate").__class__ = _EvaluatePackage
