"""A task's signature, read from its source without running it, and how alike two are.

The operator set comes from the reference's `Model`: the torch functions and
tensor methods its methods call, the layers `__init__` builds and the
arithmetic operators it writes; the inputs' ranks and total size from
`get_inputs()` with the file's size constants. Reading beats running here:
the driver never executes a task (only the judge's sandboxed oracle does).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from kernelevo.cache_dir import cache_key
from kernelevo.parsing import parse_source
from kernelevo.task import find_constants

GEMM_OPS = frozenset({"matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "einsum", "bilinear"})
REDUCTION_OPS = frozenset("""
sum mean max min amax amin prod softmax log_softmax logsumexp norm var std argmax argmin cumsum
cumprod layer_norm group_norm batch_norm instance_norm rms_norm local_response_norm mse_loss
cross_entropy nll_loss kl_div smooth_l1_loss huber_loss hinge_embedding_loss cosine_similarity
triplet_margin_loss normalize layernorm groupnorm batchnorm1d batchnorm2d batchnorm3d
instancenorm2d rmsnorm softmax2d logsoftmax
""".split())
# Calls that allocate, reshape or describe data: any program makes them.
NON_COMPUTE = frozenset("""
empty empty_like zeros zeros_like ones ones_like full full_like new_empty new_zeros new_ones
view reshape permute transpose t contiguous expand expand_as unsqueeze squeeze flatten
unflatten size dim stride numel to cuda cpu float half bfloat16 double int long type clone
detach item chunk split narrow select index_select __init__ super append randn rand arange
tensor parameter register_buffer
""".split())
_TORCH_ROOTS = ("torch", "F", "nn", "functional", "special", "linalg", "fft")
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
           ast.MatMult: "matmul", ast.Pow: "pow", ast.FloorDiv: "floor_divide", ast.Mod: "remainder"}
_INPUT_MAKERS = frozenset({"randn", "rand", "randint", "zeros", "ones", "empty", "full",
                           "randn_like", "rand_like", "normal"})
# Total input elements at or below each bound: the size class (powers of two).
SIZE_CLASSES = ((1 << 16, "small"), (1 << 22, "medium"), (1 << 26, "large"))
# Weights of each part of a signature in `similarity` (they add up to 1).
WEIGHTS = {"ops": 0.6, "family": 0.2, "dtype": 0.1, "ranks": 0.05, "size_class": 0.05}


@dataclass(frozen=True)
class Signature:
    """What makes two tasks alike: operators, their family, input ranks and size, dtype,
    backend."""

    ops: tuple[str, ...]
    family: str  # gemm, conv, reduction or elementwise
    ranks: tuple[int, ...]
    size_class: str  # small, medium, large, huge or unknown
    dtype: str  # the run's precision: fp32, fp16, bf16
    backend: str  # triton or cuda

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Signature:
        data = json.loads(text)
        return cls(tuple(data["ops"]), data["family"], tuple(data["ranks"]),
                   data["size_class"], data["dtype"], data["backend"])

    def describe(self) -> str:
        ranks = ", ".join(f"{rank}-D" for rank in self.ranks) or "no tensor inputs"
        return (f"{self.family} ({', '.join(self.ops) or 'no ops found'}); {ranks}; "
                f"{self.size_class}; {self.dtype}; {self.backend}")


def task_key(task_source: str) -> str:
    """A task's identity in the memory: its source's hash (other sizes, another task)."""
    return cache_key(task_source)


def signature_of(task_source: str, precision: str, backend: str) -> Signature:
    """The signature of a KernelBench-format task, from its source alone."""
    tree = parse_source(task_source)
    constants = find_constants(tree)
    ops = sorted(_model_ops(tree))
    shapes = _input_shapes(tree, constants)
    return Signature(tuple(ops), family_of(ops), tuple(len(shape) for shape in shapes),
                     _size_class(shapes), precision, backend)


def family_of(ops: list[str] | tuple[str, ...]) -> str:
    names = set(ops)
    if names & GEMM_OPS:
        return "gemm"
    if any(name.startswith(("conv", "conv_transpose")) for name in names):
        return "conv"
    if names & REDUCTION_OPS:
        return "reduction"
    return "elementwise"


def similarity(first: Signature, second: Signature) -> float:
    """0 to 1: how much of one task's lessons should carry to the other; 0 across backends."""
    if first.backend != second.backend:
        return 0.0
    union = set(first.ops) | set(second.ops)
    shared = len(set(first.ops) & set(second.ops)) / len(union) if union else 1.0
    score = WEIGHTS["ops"] * shared
    for part in ("family", "dtype", "ranks", "size_class"):
        score += WEIGHTS[part] * (getattr(first, part) == getattr(second, part))
    return round(score, 4)


def _model_ops(tree: ast.Module) -> set[str]:
    model = next((node for node in tree.body
                  if isinstance(node, ast.ClassDef) and node.name == "Model"), None)
    if model is None:
        return set()
    layers: dict[str, str] = {}
    ops: set[str] = set()
    for node in ast.walk(model):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            layer = _torch_call_name(node.value.func)
            for target in node.targets:
                if layer and _is_self_attribute(target):
                    layers[target.attr] = layer.lower()  # type: ignore[attr-defined]
    for method in (item for item in model.body if isinstance(item, ast.FunctionDef)):
        if method.name == "__init__":
            continue
        ops |= _ops_in(method, layers)
    return {op for op in ops if op not in NON_COMPUTE}


def _ops_in(method: ast.FunctionDef, layers: dict[str, str]) -> set[str]:
    ops: set[str] = set()
    for node in ast.walk(method):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            ops.add(_BINARY[type(node.op)])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
                and not isinstance(node.operand, ast.Constant):  # dim=-1 computes nothing
            ops.add("neg")
        elif isinstance(node, ast.Call):
            name = _call_op(node.func, layers)
            if name:
                ops.add(name.lstrip("_").lower())
    return ops


def _call_op(func: ast.expr, layers: dict[str, str]) -> str | None:
    if _is_self_attribute(func):
        return layers.get(func.attr)  # type: ignore[attr-defined]
    if isinstance(func, ast.Attribute):
        return _torch_call_name(func) or func.attr  # torch.relu or x.sum
    return None


def _torch_call_name(func: ast.expr) -> str | None:
    """`relu` for torch.relu, F.relu, torch.nn.functional.relu, nn.ReLU; None otherwise."""
    if not isinstance(func, ast.Attribute):
        return None
    root = func.value
    while isinstance(root, ast.Attribute):
        root = root.value
    return func.attr if isinstance(root, ast.Name) and root.id in _TORCH_ROOTS else None


def _is_self_attribute(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def _input_shapes(tree: ast.Module, constants: dict[str, int]) -> list[tuple[int | None, ...]]:
    function = next((node for node in tree.body if isinstance(node, ast.FunctionDef)
                     and node.name == "get_inputs"), None)
    if function is None:
        return []
    shapes = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _INPUT_MAKERS:
            shape = _shape_of(node, constants)
            if shape is not None:
                shapes.append(shape)
    return shapes


def _shape_of(call: ast.Call, constants: dict[str, int]) -> tuple[int | None, ...] | None:
    name = call.func.attr  # type: ignore[attr-defined]
    args: list[ast.expr] = list(call.args)
    if name == "randint":
        size = next((k.value for k in call.keywords if k.arg == "size"), None)
        args = [size] if size is not None else args[2:3]
    elif name in ("full", "normal"):
        args = args[:1]
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = list(args[0].elts)
    if not args or name.endswith("_like"):
        return None
    return tuple(_value(arg, constants) for arg in args)


def _value(node: ast.expr, constants: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
        left, right = _value(node.left, constants), _value(node.right, constants)
        if left is None or right is None:
            return None
        return left * right if isinstance(node.op, ast.Mult) else left + right
    return None


def _size_class(shapes: list[tuple[int | None, ...]]) -> str:
    sizes = [math.prod(shape) for shape in shapes if shape and None not in shape]  # type: ignore
    if not sizes or len(sizes) != len(shapes):
        return "unknown"
    total = sum(sizes)
    return next((name for bound, name in SIZE_CLASSES if total <= bound), "huge")


def to_payload(signature: Signature) -> dict[str, Any]:
    """The signature as a plain dict, for events and exports."""
    return asdict(signature)
