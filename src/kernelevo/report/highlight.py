"""Python source highlighted as HTML, with a small tokenizer and no dependencies.

Candidates are Python files (CUDA sources live inside their string literals),
so one Python tokenizer covers both backends. A regular expression rather
than the `tokenize` module: candidates that fail to compile are shown too,
and `tokenize` stops at the first unterminated string or bad indent.
"""

from __future__ import annotations

import builtins
import html
import keyword
import re

from markupsafe import Markup

_TOKEN = re.compile(
    r"""
    (?P<comment>\#[^\n]*)
  | (?P<string>(?:\b[rRbBuUfF]{1,2})?
        (?:\"\"\"[\s\S]*?(?:\"\"\"|\Z)
          |'''[\s\S]*?(?:'''|\Z)
          |"(?:[^"\\\n]|\\.)*"?
          |'(?:[^'\\\n]|\\.)*'?))
  | (?P<decorator>@[A-Za-z_][\w.]*)
  | (?P<number>\b(?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+
        |\d[\d_]*(?:\.[\d_]*)?(?:[eE][+-]?\d+)?[jJ]?)
      |\.\d[\d_]*(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_]\w*)
    """,
    re.VERBOSE,
)
_KEYWORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))
# Names that follow these keywords are definitions, shown like headings.
_DEFINERS = frozenset({"def", "class"})


def tokens(source: str) -> list[tuple[str, str]]:
    """(css class, text) pairs covering `source` exactly; class '' is plain text."""
    result: list[tuple[str, str]] = []
    position = 0
    previous_name = ""
    for match in _TOKEN.finditer(source):
        if match.start() > position:
            result.append(("", source[position:match.start()]))
        kind = match.lastgroup or ""
        text = match.group()
        if kind == "name":
            kind = _name_class(text, previous_name)
            previous_name = text
        result.append((kind, text))
        position = match.end()
    if position < len(source):
        result.append(("", source[position:]))
    return result


def _name_class(name: str, previous_name: str) -> str:
    if previous_name in _DEFINERS:
        return "definition"
    if name in _KEYWORDS:
        return "keyword"
    if name in _BUILTINS:
        return "builtin"
    return ""


def highlight(source: str) -> Markup:
    """The source as escaped HTML lines, one `<span class="line">` each, tokens in spans."""
    lines: list[list[str]] = [[]]
    for kind, text in tokens(source):
        # A token may span lines (docstrings, CUDA sources): close and reopen
        # its span on each line so every line is a self-contained element.
        for index, part in enumerate(text.split("\n")):
            if index:
                lines.append([])
            if part:
                escaped = html.escape(part, quote=False)
                lines[-1].append(f'<span class="tok-{kind}">{escaped}</span>' if kind else escaped)
    if source.endswith("\n"):
        lines.pop()
    body = "\n".join(f'<span class="line">{"".join(parts)}</span>' for parts in lines)
    return Markup(f'<pre class="code"><code>{body}</code></pre>')
