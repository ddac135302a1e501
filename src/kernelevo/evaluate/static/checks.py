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
from kernelevo.config import POLICIES
from kernelevo.errors import ConfigError
from kernelevo.evaluate.static.cuda_source import has_kernel_source, string_hits
from kernelevo.evaluate.static.identity import identity_hits
from kernelevo.evaluate.static.rules import Hit
from kernelevo.evaluate.static.scan import Scanner
from kernelevo.evaluate.verdict import REASONS
from kernelevo.parsing import parse_source

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
        tree = parse_source(source)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 0
        message = getattr(exc, "msg", None) or str(exc)
        return [Finding("syntax_error", line, f"not valid Python: {message}; fix the syntax")]
    scanner = Scanner(tree)
    scanner.visit(tree)
    hits = scanner.hits + string_hits(tree) + identity_hits(tree, scanner.names)
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


def _backend_hits(scanner: Scanner, tree: ast.Module, backend: str, policy: str) -> list[Hit]:
    if backend == "pytorch":
        if policy == "strict":
            return [("no_custom_kernel", 0, "strict policy needs a Triton or CUDA kernel; "
                     "backend pytorch has none")]
        return []
    if backend == "triton":
        if not scanner.kernels and not scanner.jit_called:
            return [("no_custom_kernel", 0, "backend triton but no @triton.jit function: "
                     "write the computation as a Triton kernel and launch it")]
        # A kernel counts as launched once anything refers to it (`k[grid]`,
        # `self._k[grid]`, `launch(k, ...)`); a ghost launch is caught at run time.
        if scanner.kernels and not scanner.referenced_kernels():
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
