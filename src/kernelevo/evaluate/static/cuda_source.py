"""Checks of kernel source held in string literals (cuda_sources, cpp_sources).

CUDA candidates carry their C++ in Python strings, out of reach of the AST
rules; these regular expressions look for the same tricks there. Comments
are blanked first so an explanation of what the code avoids is not a finding.
"""

from __future__ import annotations

import ast
import re
from typing import Iterator

from kernelevo.evaluate.static.rules import ADVICE, Hit

# (pattern, reason) for C/C++/CUDA constructs.
SOURCE_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bcu(?:da)?Graph\w*|\bcu(?:da)?StreamBeginCapture\w*"), "cuda_graph"),
    (re.compile(r"\bcu(?:da)?StreamCreate\w*|\bcudaStreamNonBlocking\b|\bcudaStreamPerThread\b"
                r"|\bgetStreamFromPool\b"), "side_stream"),
    # std::thread::hardware_concurrency() and std::thread::id start nothing
    (re.compile(r"\bstd::j?thread\b(?!::)|\bpthread_create\b|\bstd::async\b"),
     "background_thread"),
    (re.compile(r"\b(?:system|popen|v?fork|exec[lv]p?e?|posix_spawnp?)\s*\("), "spawned_process"),
    (re.compile(r"\b(?:fopen|freopen)\s*\(|\b[io]?fstream\b|\bstd::filesystem\b"), "file_io"),
    (re.compile(r"\b(?:dlopen|dlsym|setenv|putenv)\s*\(|\bLD_PRELOAD\b"), "harness_tampered"),
)
# Comments explain, includes only declare: neither runs anything.
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|^[ \t]*#[ \t]*include\b[^\n]*", re.DOTALL | re.M)
_LOOKS_LIKE_C = re.compile(r"[;{}]|#include")
KERNEL_QUALIFIER = re.compile(r"\b__global__\b")


def c_code(text: str) -> str | None:
    """The text with C comments and includes blanked (lines kept), or None if not C-like."""
    if not _LOOKS_LIKE_C.search(text):
        return None
    return _C_COMMENT.sub(lambda m: "\n" * m.group().count("\n"), text)


def source_hits(text: str, first_line: int) -> Iterator[Hit]:
    """Findings inside one C-like string literal starting at `first_line`."""
    code = c_code(text)
    if code is None:
        return
    for pattern, reason in SOURCE_RULES:
        for match in pattern.finditer(code):
            line = first_line + code.count("\n", 0, match.start())
            yield reason, line, f"`{match.group().strip()}` in kernel source: {ADVICE[reason]}"


def _source_strings(tree: ast.Module) -> list[tuple[str, int]]:
    """(text, line) of string literals that may hold kernel source: all but docstrings."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
    return [(node.value, node.lineno) for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in docstrings]


def string_hits(tree: ast.Module) -> list[Hit]:
    """Findings in every kernel-source string of the file."""
    return [hit for text, line in _source_strings(tree) for hit in source_hits(text, line)]


def has_kernel_source(tree: ast.Module) -> bool:
    """Whether some string defines a `__global__` function outside comments."""
    codes = (c_code(text) for text, _ in _source_strings(tree))
    return any(code is not None and KERNEL_QUALIFIER.search(code) for code in codes)
