"""Static honesty checks: what a candidate's source shows before it runs.

A first filter with few false positives. Source can hide what it does, so
every trick that matters here also has a dynamic check at run time; these
rules catch the plain cases early and name the line, so the model can fix
its next attempt.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelevo.candidate import BACKENDS
from kernelevo.errors import ConfigError
from kernelevo.evaluate.static_cuda import has_kernel_source, string_hits
from kernelevo.evaluate.static_rules import (
    ADVICE, ALLOWED_ENV_KEYS, ATTRIBUTE_RULES, CONTAINER_MUTATORS, ENV_MUTATORS, LAZY_DUNDERS,
    Hit, Names, compute_method, find_containers, find_layers, graph_mode, is_container,
    is_load_inline, literal_keys, name_rule, self_path, store_targets, strict_forbidden_torch,
    updates_itself,
)
from kernelevo.evaluate.verdict import REASONS

POLICIES = ("strict", "default", "permissive")

# Every reason a static rule can give; the rest need the candidate to run.
STATIC_REASONS = frozenset({
    "syntax_error", "no_modelnew", "inherits_reference", "try_fallback", "dynamic_code",
    "harness_introspection", "harness_tampered", "identity_caching", "stateful_forward",
    "cuda_graph", "side_stream", "background_thread", "spawned_process", "file_io",
    "lazy_output", "no_custom_kernel", "library_compute",
})

# Permissive runs still refuse whatever attacks the judge itself.
PERMISSIVE_REASONS = frozenset({
    "syntax_error", "no_modelnew", "harness_tampered", "harness_introspection", "dynamic_code",
    "file_io", "spawned_process", "background_thread", "lazy_output",
})

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Finding:
    """One static finding: a REASONS key, the 1-based line (0: whole file), what to do."""

    reason: str
    line: int
    detail: str

    @property
    def status(self) -> str:
        return REASONS[self.reason][0]


def check_source(source: str, backend: str, policy: str = "default") -> list[Finding]:
    """Static findings for a candidate's source, sorted by line."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if policy not in POLICIES:
        raise ConfigError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 0
        message = getattr(exc, "msg", None) or str(exc)
        return [Finding("syntax_error", line, f"not valid Python: {message}; fix the syntax")]
    scanner = _Scanner(tree)
    scanner.visit(tree)
    hits = scanner.hits + string_hits(tree)
    if not _defines_modelnew(tree):
        hits.append(("no_modelnew", 0, "no ModelNew: define `class ModelNew(nn.Module)`"))
    hits += _backend_hits(scanner, tree, backend, policy)
    if policy == "strict":
        hits += scanner.strict_hits
    return _findings(hits, policy)


def _findings(hits: list[Hit], policy: str) -> list[Finding]:
    keep = PERMISSIVE_REASONS if policy == "permissive" else REASONS.keys()
    unique: dict[tuple[str, int], Finding] = {}
    for reason, line, detail in hits:
        if reason in keep:
            unique.setdefault((reason, line), Finding(reason, line, detail))
    return sorted(unique.values(), key=lambda f: (f.line, f.reason))


def _defines_modelnew(tree: ast.Module) -> bool:
    return any(
        (isinstance(node, ast.ClassDef) and node.name == "ModelNew")
        or (isinstance(node, ast.Name) and node.id == "ModelNew"
            and isinstance(node.ctx, ast.Store))
        for node in ast.walk(tree)
    )


def _backend_hits(scanner: _Scanner, tree: ast.Module, backend: str, policy: str) -> list[Hit]:
    if backend == "pytorch":
        if policy == "strict":
            return [("no_custom_kernel", 0, "strict policy needs a Triton or CUDA kernel; "
                     "backend pytorch has none")]
        return []
    if backend == "triton":
        if not scanner.kernels and not scanner.jit_called:
            return [("no_custom_kernel", 0, "backend triton but no @triton.jit function: "
                     "write the computation as a Triton kernel and launch it")]
        if scanner.kernels and not scanner.kernels & scanner.loaded:
            unused = ", ".join(sorted(scanner.kernels))
            return [("no_custom_kernel", 0, f"Triton kernel(s) {unused} defined but never "
                     "launched: launch with kernel[grid](...)")]
        return []
    hits: list[Hit] = []
    if not scanner.load_inline_line:
        hits.append(("no_custom_kernel", 0, "backend cuda but no load_inline call: build the "
                     "kernel with torch.utils.cpp_extension.load_inline"))
    if not has_kernel_source(tree):
        hits.append(("no_custom_kernel", scanner.load_inline_line, "backend cuda but no "
                     "__global__ function in any source string: write a CUDA kernel"))
    return hits


class _Scanner(ast.NodeVisitor):
    """One pass over the tree; rules that need context (function, class) live here."""

    def __init__(self, tree: ast.Module) -> None:
        self.names = Names(tree)
        self.containers = find_containers(tree)
        self.layers = find_layers(tree, self.names)
        self.hits: list[Hit] = []
        self.strict_hits: list[Hit] = []
        self.functions: list[Function] = []
        self.classes: list[ast.ClassDef] = []
        self.kernel_depth = 0
        self.kernels: set[str] = set()
        self.loaded: set[str] = set()
        self.jit_called = False
        self.load_inline_line = 0

    def hit(self, reason: str, node: ast.AST, construct: str) -> None:
        self.hits.append((reason, getattr(node, "lineno", 0), f"{construct}: {ADVICE[reason]}"))

    def strict_hit(self, node: ast.AST, construct: str) -> None:
        self.strict_hits.append(("library_compute", getattr(node, "lineno", 0),
                                 f"{construct}: {ADVICE['library_compute']}"))

    @property
    def in_function(self) -> bool:
        return bool(self.functions)

    @property
    def in_stateful_code(self) -> bool:
        """Inside a function that may run per call (not __init__, not a kernel)."""
        return (self.in_function and self.kernel_depth == 0
                and not any(f.name == "__init__" for f in self.functions))

    # imports and names
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if reason := name_rule(alias.name):
                self.hit(reason, node, f"import {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "Model":
                self.hit("inherits_reference", node, "import of Model")
            dotted = f"{node.module}.{alias.name}" if node.module and not node.level else ""
            if dotted and (reason := name_rule(dotted)):
                self.hit(reason, node, f"from {node.module} import {alias.name}")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.loaded.add(node.id)
            if node.id == "Model":
                self.hit("inherits_reference", node, "use of the reference class Model")
            dotted = self.names.dotted(node)
            if dotted and (reason := name_rule(dotted)):
                self.hit(reason, node, f"use of {dotted}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # Stores are judged as stores (a patch), not as uses of what they replace.
        dotted = self.names.dotted(node) if isinstance(node.ctx, ast.Load) else None
        if dotted and (reason := name_rule(dotted)):
            self.hit(reason, node, f"use of {dotted}")
        if reason := ATTRIBUTE_RULES.get(node.attr):
            self.hit(reason, node, f"use of .{node.attr}")
        if node.attr == "Model":
            self.hit("inherits_reference", node, f"use of {ast.unparse(node)}")
        self.generic_visit(node)

    # definitions
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            text = ast.unparse(base)
            if text == "Model" or text.endswith(".Model"):
                self.hit("inherits_reference", base, f"class {node.name}({text})")
            if text == "Tensor" or text.endswith(".Tensor"):
                self.hit("lazy_output", base, f"class {node.name}({text}) subclasses Tensor")
        self.classes.append(node)
        self.generic_visit(node)
        self.classes.pop()

    def visit_FunctionDef(self, node: Function) -> None:
        decorators = {self.names.imported(d.func if isinstance(d, ast.Call) else d)
                      for d in node.decorator_list}
        is_kernel = "triton.jit" in decorators
        if is_kernel:
            self.kernels.add(node.name)
        if self.classes and node.name in LAZY_DUNDERS and not self.functions:
            self.hit("lazy_output", node, f"{self.classes[-1].name} defines {node.name}")
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None and is_container(default):
                self.hit("stateful_forward", default, f"mutable default argument in {node.name}")
        self.functions.append(node)
        self.kernel_depth += is_kernel
        self.generic_visit(node)
        self.kernel_depth -= is_kernel
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    # control flow and state
    def visit_Try(self, node: ast.Try) -> None:
        if self.in_function:
            self.hit("try_fallback", node, f"try statement in {self.functions[-1].name}")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        keyword = "global" if isinstance(node, ast.Global) else "nonlocal"
        if self.in_function and not self._only_builds_extensions(set(node.names)):
            self.hit("stateful_forward", node, f"{keyword} {', '.join(node.names)}")

    visit_Nonlocal = visit_Global

    def _only_builds_extensions(self, declared: set[str]) -> bool:
        # `global _ext; _ext = load_inline(...)` compiles lazily; it keeps no results.
        function = self.functions[-1]
        builds = [target for node in ast.walk(function)
                  if isinstance(node, ast.Assign) and is_load_inline(node.value)
                  for target in node.targets]
        return all(node in builds for node in ast.walk(function)
                   if isinstance(node, ast.Name) and node.id in declared
                   and not isinstance(node.ctx, ast.Load))

    # stores: patches of imported modules, caches, counters
    def visit_Assign(self, node: ast.Assign) -> None:
        for target in store_targets(node.targets):
            self._check_store(target, node, node.value)
            if self.in_stateful_code and updates_itself(target, node.value):
                self.hit("stateful_forward", node, f"{ast.unparse(target)} updated in "
                         f"{self.functions[-1].name}")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._check_store(node.target, node, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store(node.target, node, node.value)
        attribute = isinstance(node.target, ast.Attribute)
        if attribute and self.in_stateful_code and not self.names.import_rooted(node.target):
            self.hit("stateful_forward", node, f"{ast.unparse(node)} keeps a counter across calls")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in store_targets(node.targets):
            self._check_store(target, node, None)
        self.generic_visit(node)

    def _check_store(self, target: ast.AST, node: ast.stmt, value: ast.AST | None) -> None:
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return
        text = ast.unparse(target)
        if self.names.import_rooted(target):
            if not self._allowed_env_write(target):
                self.hit("harness_tampered", node, f"assignment to {text}")
        elif (isinstance(target, ast.Subscript) and self.in_stateful_code
              and self_path(target) in self.containers and not is_load_inline(value)):
            self.hit("stateful_forward", node, f"store into {self_path(target)} in "
                     f"{self.functions[-1].name} (a cache between calls)")

    def _allowed_env_write(self, target: ast.AST) -> bool:
        return (isinstance(target, ast.Subscript)
                and self.names.dotted(target.value) == "os.environ"
                and isinstance(target.slice, ast.Constant)
                and target.slice.value in ALLOWED_ENV_KEYS)

    # calls
    def visit_Call(self, node: ast.Call) -> None:
        dotted = self.names.dotted(node.func) or ""
        if is_load_inline(node):
            self.load_inline_line = self.load_inline_line or node.lineno
        if dotted in ("triton.jit", "triton.language.jit") and node.args:
            self.jit_called = True
        self._check_reflection(node, dotted)
        self._check_method_call(node)
        if dotted == "torch.compile" and graph_mode(node):
            self.hit("cuda_graph", node, "torch.compile with a CUDA-graph mode")
        if self.in_stateful_code:
            self._check_library_call(node)
        self.generic_visit(node)

    def _check_reflection(self, node: ast.Call, dotted: str) -> None:
        target = node.args[0] if node.args else None
        if target is None or not self.names.import_rooted(target):
            return
        if dotted in ("setattr", "delattr", "object.__setattr__", "object.__delattr__"):
            self.hit("harness_tampered", node, f"{dotted}({ast.unparse(target)}, ...)")
        elif dotted == "getattr" and len(node.args) > 1:
            name = node.args[1]
            if not isinstance(name, ast.Constant):
                self.hit("dynamic_code", node, f"getattr({ast.unparse(target)}, <computed name>)")
            elif reason := name_rule(f"{self.names.imported(target)}.{name.value}"):
                # getattr(os, "system") is os.system spelled so a name lookup misses it
                self.hit(reason, node, f"getattr({ast.unparse(target)}, {name.value!r})")

    def _check_method_call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute):
            return
        if self.names.dotted(func.value) == "os.environ" and func.attr in ENV_MUTATORS:
            keys = literal_keys(node)
            if keys is None or not keys <= ALLOWED_ENV_KEYS:
                self.hit("harness_tampered", node, f"os.environ.{func.attr}(...)")
        elif (func.attr in CONTAINER_MUTATORS and self.in_stateful_code
              and self_path(func.value) in self.containers
              and not any(is_load_inline(arg) for arg in node.args)):
            self.hit("stateful_forward", node, f"{ast.unparse(func)}(...) in "
                     f"{self.functions[-1].name} (a cache between calls)")

    def _check_library_call(self, node: ast.Call) -> None:
        func = node.func
        imported = self.names.imported(func)
        if imported and name_rule(imported):
            return  # already a finding of its own (torch.save, torch.cuda.graph, ...)
        if imported and strict_forbidden_torch(imported):
            self.strict_hit(node, f"call of {imported}")
        elif imported is None and isinstance(func, ast.Attribute) and compute_method(func.attr):
            self.strict_hit(node, f"tensor method .{func.attr}()")
        elif self_path(func) in self.layers:
            self.strict_hit(node, f"call of the nn layer {ast.unparse(func)}")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and self.in_stateful_code:
            self.strict_hit(node, "matrix product with @")
        self.generic_visit(node)

