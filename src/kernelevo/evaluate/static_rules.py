"""Rule tables and AST helpers of the static honesty checks.

Rules match dotted names as the candidate's imports resolve them, so
`import torch as T; T.cuda.synchronize = f` and `from torch import cuda`
are seen as what they are. The visitor in `static.py` applies them.
"""

from __future__ import annotations

import ast
import builtins
from fnmatch import fnmatchcase
from typing import Iterator

Hit = tuple[str, int, str]  # (reason, 1-based line, detail)

_BUILTIN_NAMES = frozenset(dir(builtins))

# (dotted-name pattern, reason): a pattern also covers everything under it, so
# "shutil" matches shutil.rmtree. Checked against imports and references alike.
NAME_RULES: tuple[tuple[str, str], ...] = (
    *((name, "dynamic_code") for name in
      ("exec", "eval", "compile", "__import__", "importlib", "runpy", "code", "codeop")),
    *((name, "harness_introspection") for name in (
        "gc", "inspect", "traceback", "ctypes", "_ctypes", "cffi", "builtins", "__builtins__",
        "globals", "locals", "vars", "sys._getframe", "sys._current_frames", "sys.modules",
        "sys.settrace", "sys.setprofile", "sys.gettrace", "sys.getprofile", "*.__dict__")),
    *((name, "identity_caching") for name in (
        "id", "weakref", "functools.lru_cache", "functools.cache", "functools.cached_property")),
    *((name, "cuda_graph") for name in (
        "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.CUDAGraph",
        "torch.cuda.make_graphed_callables", "torch.cuda.graph_pool_handle",
        "triton.testing.do_bench_cudagraph")),
    *((name, "side_stream") for name in (
        "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.streams",
        "torch.cuda.ExternalStream", "torch.cuda.set_stream", "torch.cuda.StreamContext",
        "torch.Stream")),
    *((name, "background_thread") for name in (
        "threading", "_thread", "concurrent", "asyncio", "multiprocessing",
        "torch.multiprocessing")),
    *((name, "spawned_process") for name in (
        "subprocess", "pty", "pexpect", "os.system", "os.popen", "os.fork", "os.forkpty",
        "os.exec*", "os.spawn*", "os.posix_spawn*")),
    *((name, "file_io") for name in (
        "open", "io.open", "os.open", "os.remove", "os.unlink", "os.rename", "os.renames",
        "os.replace", "os.makedirs", "os.mkdir", "os.rmdir", "os.removedirs", "os.mkfifo",
        "os.truncate", "shutil", "tempfile", "pickle.dump", "pickle.load", "shelve", "dbm",
        "sqlite3", "mmap", "socket", "urllib", "http", "requests", "torch.save", "torch.load",
        "numpy.save*", "numpy.load*", "numpy.fromfile", "numpy.memmap")),
    # Signals, limits and process groups are how the harness stops a candidate.
    *((name, "harness_tampered") for name in (
        "signal", "resource", "unittest.mock", "os.kill", "os.killpg", "os.setsid",
        "os.setpgrp", "os.setpgid", "os.putenv", "os.unsetenv")),
    *((name, "lazy_output") for name in (
        "torch._C", "torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass",
        "torch.utils._python_dispatch", "torch.overrides")),
    ("contextlib.suppress", "try_fallback"),
)

# Attribute names suspicious on any receiver (the receiver's type is unknown).
ATTRIBUTE_RULES: dict[str, str] = {
    **dict.fromkeys(("f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame",
                     "cr_frame", "__globals__", "__code__", "__builtins__", "__subclasses__"),
                    "harness_introspection"),
    **dict.fromkeys(("data_ptr", "_cdata", "_version", "untyped_storage", "_typed_storage"),
                    "identity_caching"),
    **dict.fromkeys(("write_text", "write_bytes", "read_text", "read_bytes", "tofile", "touch"),
                    "file_io"),
    **dict.fromkeys(("_make_subclass", "_make_wrapper_subclass"), "lazy_output"),
    **dict.fromkeys(("capture_begin", "capture_end", "replay"), "cuda_graph"),
}

# Dunders that let a returned object answer a comparison without computing first.
LAZY_DUNDERS = frozenset({
    "__torch_function__", "__torch_dispatch__", "__eq__", "__ne__", "__lt__", "__le__",
    "__gt__", "__ge__", "__sub__", "__rsub__", "__abs__", "__array__", "__float__",
    "__bool__", "__getattr__", "__getattribute__",
})

# The build needs these two; any other environment write changes the harness.
ALLOWED_ENV_KEYS = frozenset({"TORCH_CUDA_ARCH_LIST", "MAX_JOBS"})
ENV_MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__",
                           "__delitem__"})
CONTAINER_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add",
                                 "appendleft", "__setitem__"})
_CONTAINER_FACTORIES = frozenset({"dict", "list", "set", "OrderedDict", "defaultdict", "deque"})

# nn containers and parameters hold weights; any other nn.Module computes when called.
PASSIVE_NN = frozenset({"Parameter", "ParameterList", "ParameterDict", "ModuleList",
                        "ModuleDict", "Identity", "Buffer"})
GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")

ADVICE: dict[str, str] = {
    "dynamic_code": "write the code out; generated code hides from review",
    "harness_introspection": "compute outputs from the inputs only; the harness is not yours",
    "harness_tampered": "leave torch, timers, signals and the environment as they are",
    "identity_caching": "recompute on every call; inputs change contents at the same address",
    "stateful_forward": "keep forward free of state between calls",
    "cuda_graph": "launch kernels directly; the harness times with graphs when asked",
    "side_stream": "launch on the current stream (torch.cuda.current_stream())",
    "background_thread": "do all work inside forward on the calling thread",
    "spawned_process": "do all work inside forward in this process",
    "file_io": "keep results in memory; load_inline is the only disk use allowed",
    "lazy_output": "return plain torch.Tensor outputs your kernels have written",
    "inherits_reference": "subclass nn.Module and compute forward with your own kernels",
    "try_fallback": "let errors propagate; a failing kernel must not fall back to PyTorch",
    "library_compute": "strict policy: do this computation in your own kernel",
}


def matches(dotted: str, pattern: str) -> bool:
    """Whether a dotted name is the pattern or lies under it."""
    return fnmatchcase(dotted, pattern) or dotted.startswith(pattern + ".")


def name_rule(dotted: str) -> str | None:
    """The reason a dotted name is suspicious, or None."""
    return next((reason for pattern, reason in NAME_RULES if matches(dotted, pattern)), None)


def attribute_chain(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """The root of `a.b.c` (or `a.b[i].c`) and the attribute names above it."""
    parts: list[str] = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        node = node.value
    return node, parts[::-1]


def is_container(value: ast.AST) -> bool:
    """A literal or constructor of a mutable container (a cache in the making)."""
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _CONTAINER_FACTORIES
    return False


class Names:
    """Resolves local names to the dotted paths they were imported as."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases: dict[str, str] = {}
        self.bound: set[str] = set()  # names the file binds itself, shadowing builtins
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.aliases[local] = alias.name if alias.asname else local
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                self.bound.add(node.id)
        self._follow_assignments(tree)

    def _follow_assignments(self, tree: ast.Module) -> None:
        # `cuda = torch.cuda` makes `cuda.synchronize = f` a patch of torch.
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                dotted = self.imported(node.value)
                if isinstance(target, ast.Name) and dotted and target.id not in self.aliases:
                    self.aliases[target.id] = dotted

    def imported(self, node: ast.AST) -> str | None:
        """Dotted name of an attribute chain rooted at an imported name."""
        root, parts = attribute_chain(node)
        if isinstance(node, ast.Subscript) or not isinstance(root, ast.Name):
            return None
        if root.id not in self.aliases:
            return None
        return ".".join([self.aliases[root.id], *parts])

    def dotted(self, node: ast.AST) -> str | None:
        """Like `imported`, but also resolves unshadowed builtins (`open`, `id`)."""
        found = self.imported(node)
        if found is not None or isinstance(node, ast.Subscript):
            return found
        root, parts = attribute_chain(node)
        if isinstance(root, ast.Name) and root.id in _BUILTIN_NAMES and root.id not in self.bound:
            return ".".join([root.id, *parts])
        if isinstance(root, ast.Name) and root.id == "__builtins__":
            return ".".join([root.id, *parts])
        return None

    def import_rooted(self, node: ast.AST) -> bool:
        """Whether a store target lies on an imported module or something reached from one."""
        root, _ = attribute_chain(node)
        return isinstance(root, ast.Name) and root.id in self.aliases


def store_targets(targets: list[ast.expr]) -> Iterator[ast.expr]:
    """Flatten tuple and starred targets of an assignment or `del`."""
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from store_targets(list(target.elts))
        elif isinstance(target, ast.Starred):
            yield from store_targets([target.value])
        else:
            yield target


def self_path(node: ast.AST) -> str | None:
    """`self.cache` for `self.cache[...]`, a bare name for `CACHE[...]`, else None."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def find_containers(tree: ast.Module) -> set[str]:
    """Module-level and per-instance containers: where caches between calls live."""
    found: set[str] = set()
    scopes: list[tuple[list[ast.stmt], str]] = [(tree.body, "")]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            scopes.append((node.body, "self."))
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    scopes.append((list(ast.walk(item)), ""))  # type: ignore[arg-type]
    for body, prefix in scopes:
        for node in body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if is_container(node.value):
                    found.update(prefix + path for t in targets if (path := self_path(t)))
    return found


# Strict policy: torch functions that only allocate, describe or reshape.
STRICT_ALLOWED_TORCH = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "tensor", "as_tensor", "device", "Size", "finfo", "iinfo",
    "is_tensor", "is_floating_point", "get_default_dtype", "promote_types", "result_type",
    "manual_seed", "no_grad", "inference_mode", "enable_grad", "set_grad_enabled", "reshape",
    "flatten", "squeeze", "unsqueeze", "transpose", "permute", "t", "narrow", "split", "chunk",
    "broadcast_to", "as_strided", "numel", "nn.functional.pad",
})
_STRICT_ALLOWED_TORCH_PACKAGES = ("cuda", "nn", "utils.cpp_extension", "autograd", "backends")
# Tensor methods that compute (the receiver's type is unknown, so only distinctive names).
COMPUTE_METHODS = frozenset({
    "sum", "mean", "matmul", "mm", "bmm", "addmm", "baddbmm", "softmax", "log_softmax", "exp",
    "log", "relu", "gelu", "sigmoid", "tanh", "max", "min", "amax", "amin", "argmax", "argmin",
    "norm", "add", "sub", "mul", "div", "pow", "sqrt", "rsqrt", "cumsum", "cumprod", "prod",
    "var", "std", "clamp", "clip", "abs", "neg", "sin", "cos", "where", "masked_fill", "dot",
    "logsumexp", "silu", "erf", "square", "reciprocal", "addcmul", "lerp", "layer_norm",
})


def strict_forbidden_torch(dotted: str) -> bool:
    """Whether a call of `torch.<...>` computes (strict policy forbids it outside __init__)."""
    if not dotted.startswith("torch."):
        return False
    rest = dotted[len("torch."):]
    if rest in STRICT_ALLOWED_TORCH:
        return False
    if rest.startswith("nn.functional"):
        return True
    return not any(rest == p or rest.startswith(p + ".") for p in _STRICT_ALLOWED_TORCH_PACKAGES)


def compute_method(name: str) -> bool:
    """Whether a method name (in-place or not) is a tensor computation."""
    return name in COMPUTE_METHODS or (name.endswith("_") and name[:-1] in COMPUTE_METHODS)


def find_layers(tree: ast.Module, names: Names) -> set[str]:
    """`self.<attr>` holding an nn layer: under strict, calling it is library compute."""
    layers = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            dotted = names.imported(node.value.func) or ""
            layer = dotted.startswith("torch.nn.") and not dotted.startswith("torch.nn.functional")
            if layer and dotted.rsplit(".", 1)[1] not in PASSIVE_NN:
                layers.update(path for t in node.targets if (path := self_path(t)))
    return layers


def is_load_inline(node: ast.AST | None) -> bool:
    """A call of load_inline, however it was imported."""
    return (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "load_inline")


def updates_itself(target: ast.AST, value: ast.AST) -> bool:
    """`self.calls = self.calls + 1`: a counter written without +=."""
    if not isinstance(target, ast.Attribute) or not isinstance(value, ast.BinOp):
        return False
    wanted = ast.dump(target.value), target.attr
    return any(isinstance(side, ast.Attribute) and (ast.dump(side.value), side.attr) == wanted
               for side in (value.left, value.right))


def literal_keys(node: ast.Call) -> set[str] | None:
    """Keys an environment mutation touches, or None when they are not literal."""
    if node.keywords:
        return None
    if len(node.args) == 1 and isinstance(node.args[0], ast.Dict):
        keys = node.args[0].keys
    else:
        keys = node.args[:1]
    if not keys or not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keys):
        return None
    return {k.value for k in keys}  # type: ignore[union-attr]


def graph_mode(node: ast.Call) -> bool:
    """torch.compile(mode=...) that captures CUDA graphs (replays the timer would miss)."""
    return any(kw.arg == "mode" and isinstance(kw.value, ast.Constant)
               and kw.value.value in GRAPH_COMPILE_MODES for kw in node.keywords)
