"""Identity caching: where a tensor's address or `id()` goes.

Passing `x.data_ptr()` to a kernel or checking `x.data_ptr() % 16` is honest.
A cache keys results on it: a dict key, a set member, a membership test, a
comparison with a value kept from an earlier call, or a store on self or in a
global for a later call. Identities are followed through locals, tuples,
f-strings and helpers that return them; alignment arithmetic (`%`, `&`)
yields a number that no longer tells two tensors apart.
"""

from __future__ import annotations

import ast

from kernelevo.evaluate.static.names import (
    FUNCTION_TYPES, SCOPE_TYPES, Names, bindings, declared_global, parameters, root_name,
    scope_nodes, store_targets,
)
from kernelevo.evaluate.static.rules import (
    ADVICE, CONTAINER_MUTATORS, IDENTITY_ATTRIBUTES, IDENTITY_METHODS, IDENTITY_WRAPPERS,
    KEY_METHODS, Hit,
)

_ALIGNMENT_OPS = (ast.Mod, ast.BitAnd)
_LARGEST_ALIGNMENT = 4096  # bytes; a larger modulus can keep addresses apart
_EQUALITY_OPS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
_KEEPERS = CONTAINER_MUTATORS - KEY_METHODS  # append, extend, insert, update, ...


class _Scope:
    """A module, class, function or lambda, with what the analysis knows of its names."""

    def __init__(self, node: ast.AST, parent: _Scope | None) -> None:
        self.node = node
        self.parent = parent
        self.chain: list[ast.AST] = [*(parent.chain if parent else []), node]
        self.local = bindings(node)
        self.kept = declared_global(node)  # global/nonlocal: outlive the call
        method = (parent is not None and isinstance(parent.node, ast.ClassDef)
                  and not any(getattr(d, "id", "") == "staticmethod"
                              for d in getattr(node, "decorator_list", [])))
        params = parameters(node)
        self.instance = params[0] if method and params else None
        self.tainted: set[str] = set()  # hold an identity
        self.state: set[str] = set()  # hold a value kept from an earlier call

    @property
    def is_function(self) -> bool:
        return isinstance(self.node, (*FUNCTION_TYPES, ast.Lambda))


def identity_hits(tree: ast.Module, names: Names) -> list[Hit]:
    """identity_caching findings: identities used as keys or kept between calls."""
    return _IdentityFlow(tree, names).hits


class _IdentityFlow:
    def __init__(self, tree: ast.Module, names: Names) -> None:
        self.names = names
        self.scopes = _collect(tree, None)
        self.callees = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        self.helpers: set[str] = set()  # functions that return an identity
        self.exempt: set[int] = set()  # displays of fresh identities compared at once
        self._propagate()
        self.hits = [hit for scope in self.scopes for hit in self._scope_hits(scope)]

    def _scope_hits(self, scope: _Scope) -> list[Hit]:
        # Pre-order, so a comparison marks its own displays exempt before they are seen.
        found = []
        for node in scope_nodes(scope.node):
            if construct := self._sink(node, scope):
                detail = f"{construct}: {ADVICE['identity_caching']}"
                found.append(("identity_caching", getattr(node, "lineno", 0), detail))
        return found

    def _propagate(self) -> None:
        grew = True
        while grew:
            grew = False
            for scope in self.scopes:
                grew |= self._taint_scope(scope)
                if isinstance(scope.node, FUNCTION_TYPES) and scope.node.name not in self.helpers:
                    if any(isinstance(node, (ast.Return, ast.Yield)) and node.value is not None
                           and self.tainted(node.value, scope) for node in scope_nodes(scope.node)):
                        self.helpers.add(scope.node.name)
                        grew = True

    def _taint_scope(self, scope: _Scope) -> bool:
        before = len(scope.tainted) + len(scope.state)
        for node in scope_nodes(scope.node):
            value, targets = _binding(node)
            if value is None:
                continue
            names = {t.id for t in store_targets(targets) if isinstance(t, ast.Name)}
            if self.tainted(value, scope):
                scope.tainted |= names
            elif self._from_state(value, scope):
                scope.state |= names
        return len(scope.tainted) + len(scope.state) > before

    # what holds an identity
    def tainted(self, expr: ast.AST | None, scope: _Scope) -> bool:
        if isinstance(expr, ast.Call):
            return self._tainted_call(expr, scope)
        if isinstance(expr, ast.Attribute):
            return expr.attr in IDENTITY_ATTRIBUTES
        if isinstance(expr, ast.Name):
            return self._tainted_name(expr.id, scope)
        if isinstance(expr, ast.BinOp):
            return not _alignment(expr) and (
                self.tainted(expr.left, scope) or self.tainted(expr.right, scope))
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return any(self.tainted(item, scope) for item in expr.elts)
        if isinstance(expr, ast.JoinedStr):
            return any(self.tainted(item, scope) for item in expr.values)
        if isinstance(expr, ast.IfExp):
            return self.tainted(expr.body, scope) or self.tainted(expr.orelse, scope)
        if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.tainted(expr.elt, scope)
        if isinstance(expr, (ast.FormattedValue, ast.Subscript, ast.Starred, ast.NamedExpr)):
            return self.tainted(expr.value, scope)
        if isinstance(expr, ast.UnaryOp):
            return self.tainted(expr.operand, scope)
        return False

    def _tainted_call(self, call: ast.Call, scope: _Scope) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in IDENTITY_METHODS:
            return True
        if isinstance(func, ast.Call) and len(func.args) == 2:  # getattr(x, "data_ptr")()
            attr = func.args[1]
            if isinstance(attr, ast.Constant) and attr.value in IDENTITY_METHODS:
                return self.names.dotted(func.func, scope.chain) == "getattr"
        dotted = self.names.dotted(func, scope.chain)
        if dotted == "id":
            return True
        if dotted in IDENTITY_WRAPPERS:
            return any(self.tainted(arg, scope) for arg in call.args)
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in self.helpers

    def _tainted_name(self, name: str, scope: _Scope | None) -> bool:
        while scope is not None:
            if name in scope.tainted:
                return True
            if name in scope.local:
                return False
            scope = scope.parent
            # class bodies are not visible from the functions nested in them
            while scope is not None and isinstance(scope.node, ast.ClassDef):
                scope = scope.parent
        return False

    # what outlives the call
    def _kept(self, target: ast.AST, scope: _Scope) -> bool:
        """Whether a store target or read is on self, a global or a closure variable."""
        root = root_name(target)
        if root is None or not scope.is_function:
            return False
        if isinstance(target, ast.Name):
            return root in scope.kept
        return _outlives(root, scope)

    def _from_state(self, expr: ast.AST, scope: _Scope) -> bool:
        if isinstance(expr, (ast.Attribute, ast.Subscript)):
            return self._kept(expr, scope)
        if isinstance(expr, ast.Name):
            return scope.is_function and (expr.id in scope.state or _outlives(expr.id, scope))
        if isinstance(expr, ast.Call) and self.names.dotted(expr.func, scope.chain) == "getattr":
            return bool(expr.args) and self._kept_object(expr.args[0], scope)
        return False

    def _kept_object(self, node: ast.AST, scope: _Scope) -> bool:
        root = root_name(node)
        return scope.is_function and root is not None and _outlives(root, scope)

    # where an identity becomes a cache
    def _sink(self, node: ast.AST, scope: _Scope) -> str | None:
        if isinstance(node, ast.Subscript) and self.tainted(node.slice, scope):
            return f"{ast.unparse(node)} looks a value up by identity"
        if isinstance(node, ast.Dict) and any(self.tainted(k, scope) for k in node.keys if k):
            return "identity as a dict key"
        if isinstance(node, ast.DictComp) and self.tainted(node.key, scope):
            return "identity as a dict key"
        if isinstance(node, (ast.Set, ast.SetComp)) and id(node) not in self.exempt:
            if self.tainted(node, scope):
                return "identity in a set"
        if isinstance(node, ast.Compare):
            return self._compare_sink(node, scope)
        if isinstance(node, ast.Call):
            return self._call_sink(node, scope)
        if isinstance(node, ast.Name) and id(node) not in self.callees:
            if isinstance(node.ctx, ast.Load) and self.names.dotted(node, scope.chain) == "id":
                return "id passed around as a key function"
        value, targets = _binding(node)
        if value is not None and self.tainted(value, scope):
            kept = [t for t in store_targets(targets) if self._kept(t, scope)]
            if kept:
                return f"identity stored in {ast.unparse(kept[0])} for a later call"
        return None

    def _compare_sink(self, node: ast.Compare, scope: _Scope) -> str | None:
        operands = [node.left, *node.comparators]
        for left, op, right in zip(operands, node.ops, operands[1:]):
            if isinstance(op, (ast.In, ast.NotIn)) and self.tainted(left, scope):
                if isinstance(right, (ast.Tuple, ast.List, ast.Set)) and not any(
                        self._from_state(item, scope) for item in right.elts):
                    self.exempt.add(id(right))  # `p in (a_ptr, b_ptr)`: an aliasing test
                    continue
                return f"identity looked up in {ast.unparse(right)}"
            if isinstance(op, _EQUALITY_OPS):
                for fresh, other in ((left, right), (right, left)):
                    if self.tainted(fresh, scope) and not self.tainted(other, scope) \
                            and self._from_state(other, scope):
                        return f"identity compared with {ast.unparse(other)} from an earlier call"
        return None

    def _call_sink(self, node: ast.Call, scope: _Scope) -> str | None:
        func, args = node.func, node.args
        dotted = self.names.dotted(func, scope.chain)
        if dotted == "len" and len(args) == 1 and isinstance(args[0], (ast.Set, ast.SetComp)):
            self.exempt.add(id(args[0]))  # len({a_ptr, b_ptr}): a distinctness test
        if dotted == "set" and any(self.tainted(arg, scope) for arg in args):
            return "identity in a set"
        if dotted == "setattr" and len(args) == 3 and self.tainted(args[2], scope):
            if self._kept_object(args[0], scope):
                return "identity stored with setattr for a later call"
        if not isinstance(func, ast.Attribute):
            return None
        if func.attr in KEY_METHODS and args and self.tainted(args[0], scope):
            return f"identity as a key of .{func.attr}()"
        if func.attr in _KEEPERS and self._kept_object(func.value, scope) \
                and any(self.tainted(arg, scope) for arg in args):
            return f"identity kept in {ast.unparse(func.value)} for a later call"
        return None


def _alignment(expr: ast.BinOp) -> bool:
    """`ptr % 16` or `ptr & 15`: a small remainder no longer tells tensors apart."""
    modulus = expr.right
    return (isinstance(expr.op, _ALIGNMENT_OPS) and isinstance(modulus, ast.Constant)
            and isinstance(modulus.value, int) and 0 < modulus.value <= _LARGEST_ALIGNMENT)


def _outlives(root: str, scope: _Scope) -> bool:
    """Whether a name in a function refers to the instance, a global or a closure variable."""
    return root == scope.instance or root in scope.kept or root not in scope.local


def _collect(node: ast.AST, parent: _Scope | None) -> list[_Scope]:
    scope = _Scope(node, parent)
    found = [scope]
    for child in scope_nodes(node):
        if isinstance(child, SCOPE_TYPES):
            found += _collect(child, scope)
    return found


def _binding(node: ast.AST) -> tuple[ast.AST | None, list[ast.expr]]:
    """The value and targets of an assignment-like node, else (None, [])."""
    if isinstance(node, ast.Assign):
        return node.value, node.targets
    if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
        return node.value, [node.target]
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return node.iter, [node.target]
    return None, []
