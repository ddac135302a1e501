"""Tasks: KernelBench-format reference programs, loaded from a file or by reference.

A task file defines `class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`
and, optionally, `output_atol` / `output_rtol`, and `backward = True` to have
its gradients judged as well as its outputs (`grad_atol` / `grad_rtol` then
set their tolerances). Sizes come from module-level
integer constants, which is what lets the evaluator shrink a task for the
Triton interpreter or perturb it to catch hard-coded sizes. A constant may be
written as an expression of int literals (`N = 2048 * 2`, `dim = 2**10`), or
be an element of a tuple or list (`input_shape = (4096,)`, keyed
`input_shape[0]`); one computed from other names (`groups = in_channels`)
follows them rather than being changed on its own.
"""

from __future__ import annotations

import ast
import operator
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernelevo.errors import TaskError
from kernelevo.parsing import parse_source
from kernelevo.paths import read_text_file

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
        # Found again, not merged: a change can move a constant that follows it.
        return Task(self.name, source, self.path, find_constants(parse_source(source)))

    @property
    def folder(self) -> str:
        """The folder of the task's file ("" for source text): modules beside it import."""
        return str(Path(self.path).resolve().parent) if self.path else ""

    @property
    def asks_backward(self) -> bool:
        """Whether the file sets `backward = True` at its top level: gradients are judged too."""
        return declares_backward(self.source)

    def declared_tolerance(self) -> tuple[float | None, float | None]:
        """The task's own `output_atol` and `output_rtol`, where it sets them with literals."""
        return (declared_number(self.source, "output_atol"),
                declared_number(self.source, "output_rtol"))

    @property
    def size_constants(self) -> dict[str, int]:
        return {k: v for k, v in self.constants.items() if v >= SIZE_CONSTANT_MIN}


def load_task(spec: str, kernelbench_dir: str | None = None) -> Task:
    """Load a task from a file path or a `kernelbench:level1/19` reference."""
    if _REFERENCE.match(spec) or spec.lower().startswith("kernelbench:"):
        path = resolve_kernelbench(spec, kernelbench_dir)
    else:
        path = Path(spec)
    source = read_text_file(path, "task", "give a KernelBench-format .py file (Model, "
                            "get_inputs, get_init_inputs)", TaskError)
    # examples/softmax/task.py is "softmax": a file named task.py says nothing.
    name = path.resolve().parent.name if path.stem == "task" and path.resolve().parent.name \
        else path.stem
    return task_from_source(source, name=name, path=str(path))


def task_from_source(source: str, name: str = "task", path: str = "") -> Task:
    """Parse and check the shape of a task file without running it."""
    try:
        tree = parse_source(source)
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


def declares_backward(source: str) -> bool:
    """Whether a task's source sets `backward = True` at module level (False if unparsable)."""
    value = _top_level_constant(source, "backward")
    return value is True


def declared_number(source: str, name: str) -> float | None:
    """A module-level number the task's source sets with a literal (`output_atol = 1e-3`),
    or None: the judge reads the imported module, this reads the text (for prompts)."""
    value = _top_level_constant(source, name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _top_level_constant(source: str, wanted: str) -> object:
    """The literal last assigned to `wanted` at the top level (None if none, or unparsable)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return None
    found: object = None  # the last assignment at the top level is what the module holds
    for statement in tree.body:
        for name, value in _assignment_pairs(statement) or []:
            if name == wanted:
                found = value.value if isinstance(value, ast.Constant) else None
    return found


def find_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level int constants written with literals only, in file order.

    Keys are names, or `name[i]` for an element of a tuple or list.
    """
    return {key: slot.value for key, slot in _size_slots(tree).items()}


def replace_constants(source: str, changes: dict[str, int]) -> str:
    """Rewrite the expressions of module-level int constants, leaving all else as written."""
    slots = _size_slots(parse_source(source))
    edits = [(slots[key].node, value) for key, value in changes.items() if key in slots]
    # ast offsets count UTF-8 bytes; splice from the end so earlier offsets stay valid.
    data = source.encode()
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    for node, value in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset),
                              reverse=True):
        # ast.parse sets every expression's end position
        assert node.end_lineno is not None and node.end_col_offset is not None
        begin = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset
        data = data[:begin] + str(int(value)).encode() + data[end:]
    return data.decode()


@dataclass(frozen=True)
class _Slot:
    """Where one constant is written: the expression that a change replaces."""

    node: ast.expr
    value: int


class _NotConstant(Exception):
    """The expression is not a small constant integer expression."""


_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
# Bounds that keep evaluating a hostile file cheap (`2 ** 10 ** 9` would not end).
_EXPONENT_MAX = 64
_VALUE_MAX = 1 << 64


def _size_slots(tree: ast.Module) -> dict[str, _Slot]:
    """Constants that can change on their own, as the module's top level leaves them."""
    known: dict[str, int] = {}  # every int-valued name so far, derived ones too
    slots: dict[str, _Slot] = {}
    for statement in tree.body:
        pairs = _assignment_pairs(statement)
        if pairs is None:
            for name in _bound_names(statement):
                _forget(name, known, slots)
            continue
        # The right-hand side is evaluated before any target is bound (a, b = b, a).
        found = [(name, _slots_of(name, value, known)) for name, value in pairs]
        also = _chained_names(statement)
        for name in [name for name, _ in pairs] + also:
            _forget(name, known, slots)
        for name, (value, own) in found:
            if value is not None:
                known[name] = value
                # `height = width = 128`: one literal, so one slot (the first
                # name's); a change to it changes every name, as the file says.
                known.update({other: value for other in also})
            slots.update(own)
    return slots


def _chained_names(statement: ast.stmt) -> list[str]:
    """The names after the first of `a = b = x` (all bound to the first one's value)."""
    if isinstance(statement, ast.Assign) and len(statement.targets) > 1 \
            and all(isinstance(t, ast.Name) for t in statement.targets):
        return [t.id for t in statement.targets[1:]]  # type: ignore[attr-defined]
    return []


def _slots_of(name: str, value: ast.expr,
              known: dict[str, int]) -> tuple[int | None, dict[str, _Slot]]:
    """The name's int value (None if not an int) and its independently changeable parts."""
    if isinstance(value, (ast.Tuple, ast.List)):
        parts = {}
        for index, element in enumerate(value.elts):
            number = _literal_value(element, known)
            if number is not None:
                parts[f"{name}[{index}]"] = _Slot(element, number)
        return None, parts
    try:
        number = _int_value(value, known)
    except _NotConstant:
        return None, {}
    uses_names = any(isinstance(n, ast.Name) for n in ast.walk(value))
    return number, ({} if uses_names else {name: _Slot(value, number)})


def _literal_value(node: ast.expr, known: dict[str, int]) -> int | None:
    """The value of an int expression made of literals only, else None."""
    if any(isinstance(n, ast.Name) for n in ast.walk(node)):
        return None
    try:
        return _int_value(node, known)
    except _NotConstant:
        return None


def _int_value(node: ast.expr, known: dict[str, int]) -> int:
    """Evaluate int literals, + - * // ** << >> and names of earlier int constants."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id in known:
        return known[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _int_value(node.operand, known)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _int_value(node.left, known), _int_value(node.right, known)
        if isinstance(node.op, (ast.Pow, ast.LShift, ast.RShift)) and \
                not 0 <= right <= _EXPONENT_MAX:
            raise _NotConstant
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            raise _NotConstant
        result = _OPERATORS[type(node.op)](left, right)
        if abs(result) > _VALUE_MAX:
            raise _NotConstant
        return result
    raise _NotConstant


def _assignment_pairs(statement: ast.stmt) -> list[tuple[str, ast.expr]] | None:
    """(name, expression) for `a = x`, `a: int = x` and `a, b = x, y`; None otherwise."""
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
            and statement.value is not None:
        return [(statement.target.id, statement.value)]
    if not isinstance(statement, ast.Assign):
        return None
    if len(statement.targets) > 1:  # a = b = x: the first name holds x (_chained_names)
        first = statement.targets[0]
        if isinstance(first, ast.Name) and _chained_names(statement):
            return [(first.id, statement.value)]
        return None
    target, value = statement.targets[0], statement.value
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts) \
            and all(isinstance(t, ast.Name) for t in target.elts) \
            and not any(isinstance(v, ast.Starred) for v in value.elts):
        return [(t.id, v) for t, v in zip(target.elts, value.elts)]  # type: ignore[attr-defined]
    return None


def _bound_names(statement: ast.stmt) -> set[str]:
    """Names a top-level statement may (re)bind; more is safe, a miss is not."""
    names: set[str] = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _forget(name: str, known: dict[str, int], slots: dict[str, _Slot]) -> None:
    known.pop(name, None)
    for key in [k for k in slots if k == name or k.startswith(f"{name}[")]:
        del slots[key]
def shrink_sizes(constants: dict[str, int], max_product: int = 1 << 15) -> dict[str, int]:
    """Smaller, odd sizes for the interpreter: halve the largest until the product fits.

    Odd results exercise tail masks, which the task's round sizes often hide.
    """
    sizes = {k: v for k, v in constants.items() if v >= SIZE_CONSTANT_MIN}
    product = 1
    for value in sizes.values():
        product *= value
    while sizes and product > max_product:
        name = max(sizes, key=sizes.__getitem__)
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
            new = new if new % 2 == 1 else new + 1
            changed[name] = new if new != value else value - 2  # 17 would stay 17
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
