"""Python source highlighted as HTML: Pygments' Python lexer, our own markup.

Candidates are Python files (CUDA sources live inside their string literals),
so one Python lexer covers both backends. Pygments' lexer never stops at an
error (an unterminated string, a bad indent): candidates that fail to
compile are shown too. Its token types map onto the few classes the
report's style sheet colours; each line is its own element.
"""

from __future__ import annotations

import functools
import html
from typing import Any

from markupsafe import Markup
from pygments.lexers.python import PythonLexer
from pygments.token import Comment, Keyword, Name, Number, Operator, String

# Pygments' token type -> the report's css class (tok-<class>), most specific first;
# a type under none of them is plain text.
_CLASSES = (
    (Name.Decorator, "decorator"),
    (Name.Function, "definition"),
    (Name.Class, "definition"),
    (Name.Builtin.Pseudo, ""),  # self, cls: plain, as any parameter
    (Name.Builtin, "builtin"),
    (Name.Exception, "builtin"),
    (Keyword, "keyword"),
    (Operator.Word, "keyword"),  # and, or, not, in, is
    (String, "string"),
    (Number, "number"),
    (Comment, "comment"),
)


@functools.lru_cache(maxsize=1)
def _lexer() -> PythonLexer:
    # Kept as written: no newline stripped or added, tabs left alone.
    return PythonLexer(stripnl=False, ensurenl=False)


def _css_class(kind: Any) -> str:
    for token_type, css in _CLASSES:
        if kind in token_type:
            return css
    return ""


def tokens(source: str) -> list[tuple[str, str]]:
    """(css class, text) pairs covering `source` exactly; class '' is plain text."""
    result: list[tuple[str, str]] = []
    for kind, text in _lexer().get_tokens(source):
        css = _css_class(kind)
        # `@triton.jit` is one decorator, though Pygments names only `@triton`.
        if result and result[-1][0] == "decorator" and (
                kind is Name or (kind in Operator and text == ".")):
            css = "decorator"
        if result and result[-1][0] == css:
            result[-1] = (css, result[-1][1] + text)
        else:
            result.append((css, text))
    return result


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
