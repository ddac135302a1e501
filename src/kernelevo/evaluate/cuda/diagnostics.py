"""The compiler's first error of a failed build, put where a reader looks first.

A failed `load_inline` raises with ninja's whole output inside a Python
traceback, and a torch extension's headers print dozens of warnings before
the candidate's own error. The verdict's message starts with that error
instead: the diagnostic line, the source line and caret nvcc prints after
it, and temporary folders cut from file names.
"""

from __future__ import annotations

import re

# A compiler's or linker's own diagnostic: "kernel.cu(14): error: ...",
# "main.cpp:3:10: fatal error: ...", "undefined reference to `f'",
# "cannot find -lfoo", an extension that loads with "undefined symbol: f".
_DIAGNOSTIC = re.compile(r"^\S.*?(\(\d+\)|:\d+(:\d+)?):\s*(fatal )?error\b"
                         r"|undefined reference to|cannot find -l|undefined symbol")
# An absolute path's folders, up to the file it names.
_FOLDERS = re.compile(r"(?<![\w.])/(?:[^\s/:()\"']+/)+(?=[^\s/:()\"']+)")
_CONTEXT_LINES = 2  # nvcc puts the offending source line and a caret after the error


def first_compile_error(log: str) -> str:
    """The first error of a compiler or linker log with its context; '' when there is none."""
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if _DIAGNOSTIC.search(line.strip()):
            context = [follow.rstrip() for follow in lines[index + 1:index + 1 + _CONTEXT_LINES]
                       if follow.strip() and not _DIAGNOSTIC.search(follow.strip())]
            return "\n".join(_FOLDERS.sub("", text) for text in [line.strip(), *context])
    return ""


def with_first_error(message: str, log: str) -> str:
    """`message` led by the first compiler error found in `log`, when there is one."""
    first = first_compile_error(log)
    return f"first error: {first}\n\n{message}" if first else message
