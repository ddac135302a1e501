"""Smaller sizes for a task whose inputs are too large to judge in reasonable time.

KernelBench's level-1 inputs reach 6.4 GB each. The largest size constant is
halved until one input set holds at most `max_elements` values; where halving
one constant alone breaks the reference (level1/100 multiplies (B, N) by (B,)
with B == N), the constants of equal value are halved together. Inputs are
made on the meta device, so nothing is allocated.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from kernelevo.task import SIZE_CONSTANT_MIN, Task


def meta_module(task: Task) -> Any:
    """The task's module imported for runs on the meta device (a copy of its own)."""
    from kernelevo.evaluate.shared.inputs import import_source

    folder = Path(tempfile.gettempdir()) / "kernelevo-meta"
    folder.mkdir(exist_ok=True)
    return import_source(task.source, f"kernelevo_meta_{abs(hash(task.source))}", folder)


def input_elements(task: Task) -> int:
    """Values in one input set of the task."""
    import torch

    with torch.device("meta"):
        values = meta_module(task).get_inputs()
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def runs_on_meta(task: Task) -> bool:
    import torch

    module = meta_module(task)
    try:
        with torch.device("meta"):
            module.Model(*module.get_init_inputs())(*module.get_inputs())
    except Exception:
        return False
    return True


def shrink_to(task: Task, max_elements: int) -> tuple[Task, dict[str, int]]:
    """The task with sizes halved until an input set fits, and the sizes changed."""
    changes: dict[str, int] = {}
    current = task
    checkable = runs_on_meta(task)
    for _ in range(64):
        if input_elements(current) <= max_elements:
            return current, changes
        sizes = {k: v for k, v in {**task.size_constants, **changes}.items()
                 if v >= SIZE_CONSTANT_MIN}
        if not sizes:
            break
        name = max(sizes, key=sizes.__getitem__)
        step = {name: sizes[name] // 2}
        if checkable and not runs_on_meta(task.with_constants({**changes, **step})):
            step = {k: v // 2 for k, v in sizes.items() if v == sizes[name]}
        changes.update(step)
        current = task.with_constants(changes)
    return current, changes
