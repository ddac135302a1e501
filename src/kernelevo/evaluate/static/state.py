"""Rules of the static checks that depend on what the code does with a value.

A store into a dict is a cache of results only if what is stored comes back
out of forward; a try statement is a fallback only if a handler can replace
the answer; a `global` is state only if it holds more than a compiled
extension. These helpers answer such questions for `static_scan.py`.
"""

from __future__ import annotations

import ast
import sys

from kernelevo.evaluate.static.names import (
    FUNCTION_TYPES, Function, Names, parameters, scope_nodes, self_path, store_targets,
)
from kernelevo.evaluate.static.rules import (
    CONTAINER_MUTATORS, CURRENT_STREAMS, PASSIVE_NN, SCALAR_ANNOTATIONS, is_container,
    is_load_inline,
)

if sys.version_info >= (3, 11):
    TryNode = ast.Try | ast.TryStar  # except* checks as a plain try does
else:
    TryNode = ast.Try


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


def find_layers(tree: ast.Module, names: Names) -> set[str]:
    """`self.<attr>` holding an nn layer: under strict, calling it is library compute."""
    layers: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            dotted = names.imported(node.value.func) or ""
            layer = dotted.startswith("torch.nn.") and not dotted.startswith("torch.nn.functional")
            if layer and dotted.rsplit(".", 1)[1] not in PASSIVE_NN:
                layers.update(path for t in node.targets if (path := self_path(t)))
    return layers


def _called_name(node: ast.AST | None) -> str:
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def find_builders(tree: ast.Module) -> set[str]:
    """Functions returning a compiled extension (load_inline, or another such function)."""
    functions = [node for node in ast.walk(tree) if isinstance(node, FUNCTION_TYPES)]
    builders: set[str] = set()
    grew = True
    while grew:
        grew = False
        for function in functions:
            if function.name not in builders and _returns_build(function, builders):
                builders.add(function.name)
                grew = True
    return builders


def is_build(value: ast.AST | None, builders: set[str]) -> bool:
    """A call that compiles a kernel or extension: what it returns holds no outputs."""
    return is_load_inline(value) or _called_name(value) in builders | {"jit"}


def _returns_build(function: Function, builders: set[str]) -> bool:
    built = {target.id for node in scope_nodes(function)
             if isinstance(node, ast.Assign) and is_build(node.value, builders)
             for target in store_targets(node.targets) if isinstance(target, ast.Name)}
    return any(isinstance(node, ast.Return) and node.value is not None
               and (is_build(node.value, builders)
                    or isinstance(node.value, ast.Name) and node.value.id in built)
               for node in scope_nodes(function))


def only_builds(function: Function, declared: set[str], builders: set[str]) -> bool:
    """Whether every store to the `global` names of a function is a compiled extension."""
    builds = [target for node in scope_nodes(function)
              if isinstance(node, ast.Assign) and is_build(node.value, builders)
              for target in node.targets]
    return all(node in builds for node in scope_nodes(function)
               if isinstance(node, ast.Name) and node.id in declared
               and not isinstance(node.ctx, ast.Load))


def honest_try(node: TryNode) -> bool:
    """A try that cannot swap a failed kernel's answer for another: cleanup or re-raise."""
    return not _escapes(node.finalbody) and all(_reraises(h) for h in node.handlers)


def _escapes(statements: list[ast.stmt]) -> bool:
    # return, break or continue in a finally block swallows the exception
    return any(isinstance(node, (ast.Return, ast.Break, ast.Continue))
               for statement in statements for node in ast.walk(statement))


def _reraises(handler: ast.ExceptHandler) -> bool:
    # any way out of the handler other than its final raise is a way to carry on
    body = handler.body
    leaves = any(isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Break, ast.Continue))
                 for statement in body for node in ast.walk(statement))
    return bool(body) and isinstance(body[-1], ast.Raise) and not leaves


def keyless(function: Function) -> bool:
    """No parameter an input tensor could be passed through: no key to cache outputs on."""
    arguments = function.args
    if arguments.vararg or arguments.kwarg:
        return False
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return all(arg.annotation is not None and ast.unparse(arg.annotation) in SCALAR_ANNOTATIONS
               for arg in every)


def mutated(function: Function, name: str) -> bool:
    """Whether a function writes into the container bound to `name` (a default argument)."""
    for node in scope_nodes(function):
        if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
            target: ast.AST = node
        elif isinstance(node, ast.AugAssign):
            target = node.target
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in CONTAINER_MUTATORS):
            target = node.func.value
        else:
            continue
        if self_path(target) == name:
            return True
    return False


def current_stream_names(tree: ast.Module, names: Names) -> set[str]:
    """Names only ever bound to the current (or default) stream."""
    current: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and current_stream_call(node.value, names):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            current.update(id(t) for t in targets if isinstance(t, ast.Name))
    stores = [node for node in ast.walk(tree)
              if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)]
    otherwise = {node.id for node in stores if id(node) not in current}
    otherwise.update(name for node in ast.walk(tree) for name in parameters(node))
    return {node.id for node in stores if id(node) in current} - otherwise


def current_stream_call(value: ast.AST | None, names: Names) -> bool:
    """`torch.cuda.current_stream(...)` or `torch.cuda.default_stream(...)`."""
    return isinstance(value, ast.Call) and names.imported(value.func) in CURRENT_STREAMS


def result_names(expr: ast.AST | None) -> set[str]:
    """Names whose value an expression hands on: `out` in `out`, `(out, n)`, `out.view(n)`."""
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, (ast.Tuple, ast.List)):
        return set().union(*(result_names(item) for item in expr.elts))
    if isinstance(expr, ast.IfExp):
        return result_names(expr.body) | result_names(expr.orelse)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return result_names(expr.func.value)
    if isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred)):
        return result_names(expr.value)
    return set()


class ResultFlow:
    """Which containers hand stored values back out: caches of results, not of configs."""

    def __init__(self, tree: ast.Module, containers: set[str]) -> None:
        functions = [node for node in ast.walk(tree) if isinstance(node, FUNCTION_TYPES)]
        self.returned = {path for path in containers
                         if any(_returns_from(function, path) for function in functions)}

    def caches_results(self, path: str, stored: ast.AST | None, function: Function,
                       aliases: set[str] | frozenset[str] = frozenset()) -> bool:
        """Whether storing `stored` into `path` inside `function` keeps an output for later."""
        if path in self.returned:
            return True
        return bool((result_names(stored) | aliases) & _returned_names(function))


def _reads(expr: ast.AST, path: str) -> bool:
    return any(isinstance(node, (ast.Name, ast.Attribute)) and self_path(node) == path
               for node in ast.walk(expr))


def _returns(function: Function) -> list[ast.expr]:
    return [node.value for node in scope_nodes(function)
            if isinstance(node, ast.Return) and node.value is not None]


def _returned_names(function: Function) -> set[str]:
    return set().union(*(result_names(value) for value in _returns(function)))


def _returns_from(function: Function, path: str) -> bool:
    read_into = {target.id for node in scope_nodes(function)
                 if isinstance(node, ast.Assign) and _reads(node.value, path)
                 for target in store_targets(node.targets) if isinstance(target, ast.Name)}
    return any(_reads(value, path) or result_names(value) & read_into
               for value in _returns(function))
