"""The AST visitor of the static checks: one pass, rules that need context.

Context means the enclosing function, class and scopes: a store is a patch
only on an imported module, state only outside `__init__`, and a builtin is
the builtin only where no visible scope rebinds its name.
"""

from __future__ import annotations

import ast

from kernelevo.evaluate.static.names import Function, Names, is_reference, self_path, store_targets
from kernelevo.evaluate.static.rules import (
    ADVICE, ALLOWED_ENV_KEYS, ALLOWED_SETTINGS, ATTRIBUTE_RULES, CACHE_DECORATORS,
    CONTAINER_MUTATORS, ENV_MUTATORS, KERNEL_DECORATORS, LAZY_DUNDERS, STREAM_CONTEXTS, Hit,
    compute_method, graph_mode, is_container, is_load_inline, literal_keys, name_rule,
    safe_member, strict_forbidden_torch, updates_itself,
)
from kernelevo.evaluate.static.state import (
    ResultFlow, TryNode, current_stream_call, current_stream_names, find_builders,
    find_containers, find_layers, honest_try, is_build, keyless, mutated, only_builds,
)


class Scanner(ast.NodeVisitor):
    """One pass over the tree, collecting hits and what the backend rules need."""

    def __init__(self, tree: ast.Module) -> None:
        self.names = Names(tree)
        self.containers = find_containers(tree)
        self.layers = find_layers(tree, self.names)
        self.builders = find_builders(tree)
        self.results = ResultFlow(tree, self.containers)
        self.current_streams = current_stream_names(tree, self.names)
        self.safe_imports = _safe_only_imports(tree, self.names)
        self.hits: list[Hit] = []
        self.strict_hits: list[Hit] = []
        self.functions: list[Function] = []
        self.scopes: list[ast.AST] = [tree]
        self.kernel_depth = 0
        self.kernels: set[str] = set()
        self.class_kernels: set[str] = set()  # reached as self._kernel or ModelNew._kernel
        self.referenced: set[str] = set()  # names read anywhere
        self.referenced_attributes: set[str] = set()  # attribute names read anywhere
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

    def dotted(self, node: ast.AST) -> str | None:
        return self.names.dotted(node, self.scopes)

    def referenced_kernels(self) -> set[str]:
        """Kernels something refers to: by name, or (defined in a class) as an attribute."""
        return (self.kernels & self.referenced
                | self.class_kernels & self.referenced_attributes)

    # imports and names
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            local = alias.asname or alias.name.split(".")[0]
            if (reason := name_rule(alias.name)) and local not in self.safe_imports:
                self.hit(reason, node, f"import {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "Model":
                self.hit("inherits_reference", node, "import of Model")
            dotted = f"{node.module}.{alias.name}" if node.module and not node.level else ""
            # a cache decorator is judged where it decorates (a keyless builder is fine)
            if dotted and dotted not in CACHE_DECORATORS and (reason := name_rule(dotted)):
                self.hit(reason, node, f"from {node.module} import {alias.name}")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.referenced.add(node.id)
            if node.id == "Model":
                self.hit("inherits_reference", node, "use of the reference class Model")
            dotted = self.dotted(node)
            if dotted and (reason := name_rule(dotted)):
                self.hit(reason, node, f"use of {dotted}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # Stores are judged as stores (a patch), not as uses of what they replace.
        dotted = self.dotted(node) if isinstance(node.ctx, ast.Load) else None
        if isinstance(node.ctx, ast.Load):
            self.referenced_attributes.add(node.attr)
        if dotted and safe_member(dotted) and _plain_dotted(node):
            return  # nothing below a plain dotted name is left to judge
        if dotted and (reason := name_rule(dotted)):
            self.hit(reason, node, f"use of {dotted}")
        if reason := ATTRIBUTE_RULES.get(node.attr):
            self.hit(reason, node, f"use of .{node.attr}")
        if node.attr == "Model":
            self.hit("inherits_reference", node, f"use of {ast.unparse(node)}")
        self.generic_visit(node)

    # definitions: decorators, defaults and annotations run in the enclosing scope
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            text = ast.unparse(base)
            if text == "Model" or text.endswith(".Model"):
                self.hit("inherits_reference", base, f"class {node.name}({text})")
            if text == "Tensor" or text.endswith(".Tensor"):
                self.hit("lazy_output", base, f"class {node.name}({text}) subclasses Tensor")
        for part in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(part)
        self._visit_body(node, node.body)

    def visit_FunctionDef(self, node: Function) -> None:
        decorators = {self.names.imported(d.func if isinstance(d, ast.Call) else d)
                      for d in node.decorator_list}
        is_kernel = bool(decorators & KERNEL_DECORATORS)
        if is_kernel:
            self.kernels.add(node.name)
            if isinstance(self.scopes[-1], ast.ClassDef):
                self.class_kernels.add(node.name)
        if isinstance(self.scopes[-1], ast.ClassDef) and node.name in LAZY_DUNDERS:
            self.hit("lazy_output", node, f"{self.scopes[-1].name} defines {node.name}")
        self._visit_signature(node)
        self.functions.append(node)
        self.kernel_depth += is_kernel
        self._visit_body(node, node.body)
        self.kernel_depth -= is_kernel
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        self._visit_body(node, [node.body])

    def _visit_body(self, scope: ast.AST, body: list) -> None:
        self.scopes.append(scope)
        for item in body:
            self.visit(item)
        self.scopes.pop()

    def _visit_signature(self, node: Function) -> None:
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            cache = self.names.imported(call.func if call else decorator) in CACHE_DECORATORS
            if cache and keyless(node):
                for part in [*call.args, *call.keywords] if call else []:
                    self.visit(part)
            else:
                self.visit(decorator)
        self._visit_defaults(node)
        arguments = node.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                 arguments.vararg, arguments.kwarg]
        annotations = [node.returns, *(arg.annotation for arg in every if arg is not None)]
        for annotation in annotations:
            if annotation is not None and not is_reference(annotation):
                self.visit(annotation)

    def _visit_defaults(self, node: Function) -> None:
        arguments = node.args
        positional = [*arguments.posonlyargs, *arguments.args]
        named_defaults = [*zip(positional[::-1], arguments.defaults[::-1]),
                          *zip(arguments.kwonlyargs, arguments.kw_defaults)]
        for arg, default in named_defaults:
            if default is None:
                continue
            # a mutable default is a cache only when the function writes into it
            if is_container(default) and mutated(node, arg.arg):
                self.hit("stateful_forward", default,
                         f"default argument {arg.arg} of {node.name} is written to")
            self.visit(default)

    # control flow and state
    def visit_Try(self, node: TryNode) -> None:
        if self.in_function and not honest_try(node):
            self.hit("try_fallback", node, f"try statement in {self.functions[-1].name}")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        keyword = "global" if isinstance(node, ast.Global) else "nonlocal"
        function = self.functions[-1] if self.functions else None
        if function and not only_builds(function, set(node.names), self.builders):
            self.hit("stateful_forward", node, f"{keyword} {', '.join(node.names)}")

    visit_Nonlocal = visit_Global

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
            self.visit(node.value)
        self.visit(node.target)
        if not is_reference(node.annotation):
            self.visit(node.annotation)

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
            if not self._allowed_global_write(target, value):
                self.hit("harness_tampered", node, f"assignment to {text}")
            return
        path = self_path(target)
        if isinstance(target, ast.Subscript) and self.in_stateful_code \
                and path in self.containers and not is_build(value, self.builders):
            aliases = {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
            if self.results.caches_results(path, value, self.functions[-1], aliases):
                self.hit("stateful_forward", node, f"store into {path} in "
                         f"{self.functions[-1].name}, returned later (a cache of outputs)")

    def _allowed_global_write(self, target: ast.AST, value: ast.AST | None) -> bool:
        if isinstance(value, ast.Constant) and value.value is True \
                and self.names.imported(target) in ALLOWED_SETTINGS:
            return True
        return (isinstance(target, ast.Subscript)
                and self.names.dotted(target.value) == "os.environ"
                and isinstance(target.slice, ast.Constant)
                and target.slice.value in ALLOWED_ENV_KEYS)

    # calls
    def visit_Call(self, node: ast.Call) -> None:
        dotted = self.dotted(node.func) or ""
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
        self._visit_call_parts(node, dotted)

    def _visit_call_parts(self, node: ast.Call, dotted: str) -> None:
        # Entering the current stream, or naming a type to isinstance, runs nothing suspect.
        current = (dotted in STREAM_CONTEXTS and len(node.args) == 1 and not node.keywords
                   and self._current_stream(node.args[0]))
        type_check = (dotted in ("isinstance", "issubclass") and len(node.args) == 2
                      and is_reference(node.args[1]))
        if not current:
            self.visit(node.func)
        for arg in node.args[:1] if type_check else node.args:
            self.visit(arg)
        for keyword in node.keywords:
            self.visit(keyword)

    def _current_stream(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.current_streams
        return current_stream_call(node, self.names)

    def _check_reflection(self, node: ast.Call, dotted: str) -> None:
        target = node.args[0] if node.args else None
        name = node.args[1] if len(node.args) > 1 else None
        if dotted == "getattr" and isinstance(name, ast.Constant) and isinstance(name.value, str):
            self.referenced_attributes.add(name.value)
        if target is None or not self.names.import_rooted(target):
            return
        if dotted in ("setattr", "delattr", "object.__setattr__", "object.__delattr__"):
            self.hit("harness_tampered", node, f"{dotted}({ast.unparse(target)}, ...)")
        elif dotted == "getattr" and name is not None:
            if not isinstance(name, ast.Constant):
                self.hit("dynamic_code", node, f"getattr({ast.unparse(target)}, <computed name>)")
            elif reason := name_rule(f"{self.names.imported(target)}.{name.value!s}"):
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
            return
        path = self_path(func.value)
        if func.attr not in CONTAINER_MUTATORS or not self.in_stateful_code \
                or path not in self.containers:
            return
        stored = node.args[-1] if node.args else None
        function = self.functions[-1]
        if not is_build(stored, self.builders) \
                and self.results.caches_results(path, stored, function):
            self.hit("stateful_forward", node, f"{ast.unparse(func)}(...) in {function.name}, "
                     "returned later (a cache of outputs)")

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


def _plain_dotted(node: ast.AST) -> bool:
    """`a.b.c` with no subscript or call anywhere in the chain."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _safe_only_imports(tree: ast.Module, names: Names) -> set[str]:
    """Local names of flagged modules used only for their SAFE_MEMBERS (`threading.Lock`)."""
    safe_reads = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and safe_member(names.imported(node) or "")}
    reads: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads.setdefault(node.id, []).append(id(node))
    imported = {alias.asname or alias.name.split(".")[0]
                for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    return {local for local in imported
            if all(read in safe_reads for read in reads.get(local, []))
            and any(safe_member(f"{names.aliases[local]}.{member}")
                    for member in _members_read(tree, local))}


def _members_read(tree: ast.Module, local: str) -> set[str]:
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == local}
