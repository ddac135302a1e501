"""Name resolution of the static checks: imports, aliases and scopes.

Rules match dotted names as the candidate's imports resolve them, so
`import torch as T; T.cuda.synchronize = f` and `from torch import cuda`
are seen as what they are. A builtin (`id`, `open`, `vars`) counts only where
no visible scope rebinds it: an `id=None` argument of one function neither
hides a real `id(x)` in another nor is itself a use of `id`.
"""

from __future__ import annotations

import ast
import builtins
from typing import Iterator, Sequence

BUILTIN_NAMES = frozenset(dir(builtins))
Function = ast.FunctionDef | ast.AsyncFunctionDef
FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPE_TYPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def attribute_chain(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """The root of `a.b.c` (or `a.b[i].c`) and the attribute names above it."""
    parts: list[str] = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        node = node.value
    return node, parts[::-1]


def root_name(node: ast.AST) -> str | None:
    """`self` for `self.a[i].b`, `x` for `x`, else None."""
    root, _ = attribute_chain(node)
    return root.id if isinstance(root, ast.Name) else None


def is_reference(node: ast.AST) -> bool:
    """A plain name, dotted name or tuple of them: evaluating it runs nothing."""
    if isinstance(node, ast.Tuple):
        return all(is_reference(item) for item in node.elts)
    if isinstance(node, ast.Subscript):  # Optional[torch.cuda.Stream]
        return is_reference(node.value) and is_reference(node.slice)
    if isinstance(node, ast.BinOp):  # torch.cuda.Stream | None
        return is_reference(node.left) and is_reference(node.right)
    return isinstance(node, (ast.Name, ast.Attribute, ast.Constant))


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


def _outer_parts(node: ast.AST) -> list[ast.AST]:
    """The parts of a nested def, lambda or class evaluated in the enclosing scope."""
    if isinstance(node, FUNCTION_TYPES) or isinstance(node, ast.Lambda):
        arguments = node.args
        parts: list[ast.AST | None] = [*arguments.defaults, *arguments.kw_defaults]
        if isinstance(node, FUNCTION_TYPES):
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                     arguments.vararg, arguments.kwarg]
            parts += [*node.decorator_list, node.returns,
                      *(arg.annotation for arg in every if arg is not None)]
        return [part for part in parts if part is not None]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    return list(ast.iter_child_nodes(node))


def scope_body(scope: ast.AST) -> list[ast.AST]:
    """The code a scope runs itself."""
    if isinstance(scope, ast.Lambda):
        return [scope.body]
    return list(getattr(scope, "body", []))


def scope_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a scope's own code, not of the functions, lambdas or classes it nests."""
    stack = scope_body(scope)[::-1]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(_outer_parts(node)[::-1])


def parameters(function: ast.AST) -> list[str]:
    """Parameter names of a def or lambda, in order."""
    if not isinstance(function, (*FUNCTION_TYPES, ast.Lambda)):
        return []
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, arguments.vararg, *arguments.kwonlyargs,
             arguments.kwarg]
    return [arg.arg for arg in every if arg is not None]


def declared_global(scope: ast.AST) -> set[str]:
    """Names a function declares `global` or `nonlocal`: stores to them outlive the call."""
    return {name for node in scope_nodes(scope) if isinstance(node, (ast.Global, ast.Nonlocal))
            for name in node.names}


def bindings(scope: ast.AST) -> set[str]:
    """Names a scope binds itself: parameters, assignments, defs, imports, handlers."""
    bound = set(parameters(scope))
    for node in scope_nodes(scope):
        if isinstance(node, (*FUNCTION_TYPES, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound - declared_global(scope)


class Names:
    """Resolves names to the dotted paths they were imported as, scope by scope."""

    def __init__(self, tree: ast.Module) -> None:
        self.module = tree
        self.aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.aliases[local] = alias.name if alias.asname else local
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.bound = {id(scope): bindings(scope) for scope in ast.walk(tree)
                      if isinstance(scope, SCOPE_TYPES)}
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

    def dotted(self, node: ast.AST, scopes: Sequence[ast.AST] = ()) -> str | None:
        """Like `imported`, but also resolves builtins no scope in `scopes` rebinds."""
        found = self.imported(node)
        if found is not None or isinstance(node, ast.Subscript):
            return found
        root, parts = attribute_chain(node)
        if not isinstance(root, ast.Name):
            return None
        builtin = root.id in BUILTIN_NAMES and not self.shadowed(root.id, scopes)
        if builtin or root.id == "__builtins__":
            return ".".join([root.id, *parts])
        return None

    def shadowed(self, name: str, scopes: Sequence[ast.AST]) -> bool:
        """Whether a scope visible from the innermost of `scopes` binds `name`."""
        chain = list(scopes) or [self.module]
        if chain[0] is not self.module:
            chain.insert(0, self.module)
        # Class bodies are not visible from the methods inside them.
        visible = [s for i, s in enumerate(chain)
                   if not isinstance(s, ast.ClassDef) or i == len(chain) - 1]
        return any(name in self.bound.get(id(scope), ()) for scope in visible)

    def import_rooted(self, node: ast.AST) -> bool:
        """Whether a store target lies on an imported module or something reached from one."""
        root, _ = attribute_chain(node)
        return isinstance(root, ast.Name) and root.id in self.aliases
