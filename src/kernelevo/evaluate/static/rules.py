"""Rule tables of the static honesty checks, and the small predicates over them.

Names are dotted as the candidate's imports resolve them (`static_names.py`);
the visitor in `static_scan.py` applies these tables, `static_identity.py` and
`static_state.py` the rules that need data flow.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from fnmatch import fnmatchcase

Hit = tuple[str, int, str]  # (reason, 1-based line, detail)

# (dotted-name pattern, reason): a pattern also covers everything under it, so
# "shutil" matches shutil.rmtree. Checked against imports and references alike.
NAME_RULES: tuple[tuple[str, str], ...] = (
    *((name, "dynamic_code") for name in
      ("exec", "eval", "compile", "__import__", "importlib", "runpy", "code", "codeop")),
    *((name, "harness_introspection") for name in (
        "gc", "inspect", "traceback", "ctypes", "_ctypes", "cffi", "builtins", "__builtins__",
        "globals", "locals", "vars", "sys._getframe", "sys._current_frames", "sys.modules",
        "sys.settrace", "sys.setprofile", "sys.gettrace", "sys.getprofile", "*.__dict__")),
    # id() and data_ptr() are judged by where their value goes (static_identity.py).
    *((name, "identity_caching") for name in (
        "weakref", "functools.lru_cache", "functools.cache", "functools.cached_property")),
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

# Members of flagged modules that do none of what the module is flagged for;
# importing such a module only for them is no finding either.
SAFE_MEMBERS: dict[str, frozenset[str]] = {
    "threading": frozenset({"Lock", "RLock"}),  # a lock around a lazy build starts no thread
    "multiprocessing": frozenset({"cpu_count"}),  # sizes MAX_JOBS for load_inline
    "tempfile": frozenset({"gettempdir"}),  # reads a path, writes nothing
    "gc": frozenset({"collect"}),  # frees memory and returns a count, never an object
    "torch._C": frozenset({"_cuda_getCurrentRawStream"}),  # the current stream, as Triton reads it
}
# Caches keyed on their arguments; with no argument (or only scalars) there is
# no input to key on, so `@lru_cache def _build()` is a build-once helper.
CACHE_DECORATORS = frozenset({"functools.lru_cache", "functools.cache"})
SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "torch.dtype", "torch.device"})
KERNEL_DECORATORS = frozenset({"triton.jit", "triton.language.jit", "triton.runtime.jit.jit"})
# Entering one of these with the current stream changes nothing.
STREAM_CONTEXTS = frozenset({"torch.cuda.stream", "torch.cuda.set_stream",
                             "torch.cuda.StreamContext"})
CURRENT_STREAMS = frozenset({"torch.cuda.current_stream", "torch.cuda.default_stream"})
# Global switches that can only make the eager baseline faster; set to True.
ALLOWED_SETTINGS = frozenset({"torch.backends.cudnn.benchmark",
                              "torch.backends.cuda.matmul.allow_tf32",
                              "torch.backends.cudnn.allow_tf32"})

# What tells one tensor from another by identity rather than contents.
IDENTITY_METHODS = frozenset({"data_ptr", "untyped_storage", "_typed_storage", "storage"})
IDENTITY_ATTRIBUTES = frozenset({"_cdata", "_version"})
# Calls that keep an identity a lookup key (str(ptr), (ptr, shape)), unlike arithmetic.
IDENTITY_WRAPPERS = frozenset({"hash", "int", "str", "repr", "hex", "tuple", "frozenset",
                               "list", "sorted"})
# Container methods whose first argument is a key or set member.
KEY_METHODS = frozenset({"get", "setdefault", "pop", "add", "discard", "remove", "fromkeys",
                         "__contains__", "__getitem__", "__setitem__", "__delitem__"})

# Attribute names suspicious on any receiver (the receiver's type is unknown).
ATTRIBUTE_RULES: dict[str, str] = {
    **dict.fromkeys(("f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame",
                     "cr_frame", "__globals__", "__code__", "__builtins__", "__subclasses__"),
                    "harness_introspection"),
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
    "stateful_forward": "keep forward (and backward) free of state between calls",
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


def safe_member(dotted: str) -> bool:
    """Whether a dotted name is one of the SAFE_MEMBERS of a flagged module."""
    return any(dotted.startswith(module + ".")
               and dotted[len(module) + 1:].split(".")[0] in members
               for module, members in SAFE_MEMBERS.items())


def name_rule(dotted: str) -> str | None:
    """The reason a dotted name is suspicious, or None."""
    if safe_member(dotted):
        return None
    return next((reason for pattern, reason in NAME_RULES if matches(dotted, pattern)), None)


def is_container(value: ast.AST) -> bool:
    """A literal or constructor of a mutable container (a cache in the making)."""
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _CONTAINER_FACTORIES
    return False


# Strict policy: torch functions that only allocate, describe or reshape.
STRICT_ALLOWED_TORCH = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "tensor", "as_tensor", "device", "Size", "finfo", "iinfo",
    "is_tensor", "is_floating_point", "get_default_dtype", "promote_types", "result_type",
    "manual_seed", "no_grad", "inference_mode", "enable_grad", "set_grad_enabled", "reshape",
    "flatten", "squeeze", "unsqueeze", "transpose", "permute", "t", "narrow", "split", "chunk",
    "broadcast_to", "as_strided", "numel", "nn.functional.pad", "broadcast_shapes",
    "is_grad_enabled", "is_inference_mode_enabled", "is_autocast_enabled",
})
_STRICT_ALLOWED_TORCH_PACKAGES = ("cuda", "nn", "utils.cpp_extension", "autograd", "backends",
                                  "library")
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
    keys: Sequence[ast.expr | None]
    if len(node.args) == 1 and isinstance(node.args[0], ast.Dict):
        keys = node.args[0].keys
    else:
        keys = node.args[:1]
    if not keys or not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keys):
        return None
    return {k.value for k in keys}  # type: ignore[union-attr]


def graph_mode(node: ast.Call) -> bool:
    """torch.compile that captures CUDA graphs (replays the timer would miss)."""
    for keyword in node.keywords:
        value = keyword.value
        if keyword.arg == "mode" and isinstance(value, ast.Constant):
            if value.value in GRAPH_COMPILE_MODES:
                return True
        elif keyword.arg == "options" and isinstance(value, ast.Dict):
            if any(isinstance(key, ast.Constant) and key.value == "triton.cudagraphs"
                   and not (isinstance(item, ast.Constant) and not item.value)
                   for key, item in zip(value.keys, value.values)):
                return True
    return False
