"""Tasks: KernelBench-format reference programs, loaded from a file or by reference.

A task file defines `class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`
and, optionally, `output_atol` / `output_rtol`. Sizes come from module-level
integer constants, which is what lets the evaluator shrink a task for the
Triton interpreter or perturb it to catch hard-coded sizes.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelevo.errors import TaskError

_REFERENCE = re.compile(r"^(?:kernelbench:)?(?:level|L)(\d+)/(\d+)$", re.IGNORECASE)
_REQUIRED = ("Model", "get_inputs", "get_init_inputs")
# Constants below this are usually kernel sizes, strides or head counts, whose
# change alters the task's meaning rather than its size.
SIZE_CONSTANT_MIN = 16


@dataclass(frozen=True)
class Task:
    """A reference program; `source` is the whole Python file."""

    name: str
    source: str
    path: str = ""
    constants: dict[str, int] = field(default_factory=dict)

    def with_constants(self, changes: dict[str, int]) -> "Task":
        """The same task with some module-level integer constants replaced."""
        if not changes:
            return self
        source = replace_constants(self.source, changes)
        return Task(self.name, source, self.path, {**self.constants, **changes})

    @property
    def size_constants(self) -> dict[str, int]:
        return {k: v for k, v in self.constants.items() if v >= SIZE_CONSTANT_MIN}


def load_task(spec: str, kernelbench_dir: str | None = None) -> Task:
    """Load a task from a file path or a `kernelbench:level1/19` reference."""
    if _REFERENCE.match(spec) or spec.lower().startswith("kernelbench:"):
        path = resolve_kernelbench(spec, kernelbench_dir)
    else:
        path = Path(spec)
    if not path.is_file():
        raise TaskError(f"task file not found: {path} (give a KernelBench-format .py file)")
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read task {path}: {exc}") from exc
    # examples/softmax/task.py is "softmax": a file named task.py says nothing.
    name = path.resolve().parent.name if path.stem == "task" and path.resolve().parent.name \
        else path.stem
    return task_from_source(source, name=name, path=str(path))


def task_from_source(source: str, name: str = "task", path: str = "") -> Task:
    """Parse and check the shape of a task file without running it."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TaskError(f"task {name} is not valid Python: line {exc.lineno}: {exc.msg}") from exc
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    }
    defined |= {t.id for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    missing = [n for n in _REQUIRED if n not in defined]
    if missing:
        raise TaskError(
            f"task {name} lacks {', '.join(missing)}: a KernelBench task defines "
            "class Model(nn.Module), get_inputs() and get_init_inputs()"
        )
    return Task(name=name, source=source, path=path, constants=find_constants(tree))


def find_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level `NAME = <int literal>` assignments, in file order."""
    constants: dict[str, int] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if (isinstance(target, ast.Name) and isinstance(value, ast.Constant)
                and type(value.value) is int):
            constants[target.id] = value.value
    return constants


def replace_constants(source: str, changes: dict[str, int]) -> str:
    """Rewrite the literals of module-level int constants, leaving all else as written."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in changes and isinstance(node.value, ast.Constant)):
            edits.append((node.value, changes[node.targets[0].id]))
    # Splice from the end so earlier offsets stay valid.
    for value_node, new in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        row = value_node.lineno - 1
        line = lines[row]
        lines[row] = line[: value_node.col_offset] + str(new) + line[value_node.end_col_offset:]
    return "".join(lines)


def shrink_sizes(constants: dict[str, int], max_product: int = 1 << 15) -> dict[str, int]:
    """Smaller, odd sizes for the interpreter: halve the largest until the product fits.

    Odd results exercise tail masks, which the task's round sizes often hide.
    """
    sizes = {k: v for k, v in constants.items() if v >= SIZE_CONSTANT_MIN}
    product = 1
    for value in sizes.values():
        product *= value
    while sizes and product > max_product:
        name = max(sizes, key=sizes.get)
        if sizes[name] < 2 * SIZE_CONSTANT_MIN:
            break
        product //= sizes[name]
        sizes[name] //= 2
        product *= sizes[name]
    odd = {k: v + 1 if v % 2 == 0 else v for k, v in sizes.items()}
    return {k: v for k, v in odd.items() if v != constants[k]}


def perturb_sizes(constants: dict[str, int]) -> dict[str, int]:
    """Different, odd sizes of the same order, to catch kernels specialised to the task's."""
    changed = {}
    for name, value in constants.items():
        if value >= SIZE_CONSTANT_MIN:
            new = value - value // 8 + 1
            changed[name] = new if new % 2 == 1 else new + 1
    return changed


def resolve_kernelbench(spec: str, kernelbench_dir: str | None) -> Path:
    """Find `levelN/M` in a local KernelBench checkout."""
    match = _REFERENCE.match(spec.split(":", 1)[-1] if ":" in spec else spec)
    if not match:
        raise TaskError(f"bad KernelBench reference {spec!r}: write it as kernelbench:level1/19")
    root = kernelbench_dir or os.environ.get("KERNELBENCH_DIR")
    if not root:
        raise TaskError(
            f"{spec} needs a KernelBench checkout: pass --kernelbench-dir or set KERNELBENCH_DIR"
        )
    level, number = match.groups()
    candidates = [Path(root) / "KernelBench" / f"level{level}", Path(root) / f"level{level}"]
    for folder in candidates:
        if folder.is_dir():
            hits = sorted(folder.glob(f"{int(number)}_*.py"))
            if hits:
                return hits[0]
            raise TaskError(f"no problem {number} in {folder} (files are named '{number}_Name.py')")
    raise TaskError(f"no level{level} folder under {root}: point --kernelbench-dir at a checkout")
