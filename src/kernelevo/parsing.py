"""Python source to a syntax tree, safe to call from several threads of one process.

CPython keeps the depth of the tree it is building in state that every thread
of a process shares (python/cpython#106905): two threads building trees at
once, such as a suite's lanes checking candidates or a judge's oracle thread
beside its worker's, can fail with "SystemError: AST constructor recursion
depth mismatch" on source that parses. Every parse of KernelEvo's goes
through `parse_source`, one at a time; one that still meets the error (a library's
own parse in another thread) is made once more.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()
_MISMATCH = "recursion depth mismatch"


def parse_source(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, never beside another parse of this module's."""
    with _LOCK:
        try:
            return ast.parse(source, filename)
        except SystemError as exc:
            if _MISMATCH not in str(exc):
                raise
            return ast.parse(source, filename)
