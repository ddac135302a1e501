"""Unified diffs between candidate sources, as counts and as HTML."""

from __future__ import annotations

import difflib
import html

from markupsafe import Markup

CONTEXT_LINES = 3


def diff_lines(old: str, new: str, old_label: str, new_label: str) -> list[str]:
    """The unified diff of two sources, without line endings."""
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_label, new_label,
                                     n=CONTEXT_LINES, lineterm=""))


def diff_counts(old: str, new: str) -> tuple[int, int]:
    """(lines added, lines removed) going from `old` to `new`."""
    # SequenceMatcher, not ndiff: ndiff also scores similar lines pairwise,
    # which is quadratic and slow on the long sources an LLM writes.
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    added = removed = 0
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag != "equal":
            removed += old_end - old_start
            added += new_end - new_start
    return added, removed


def diff_html(old: str, new: str, old_label: str, new_label: str) -> Markup:
    """A unified diff as a `<pre class="diff">`, one classed span per line."""
    lines = diff_lines(old, new, old_label, new_label)
    if not lines:
        return Markup('<p class="muted">no changes</p>')
    rendered = [f'<span class="{_line_class(line)}">{html.escape(line, quote=False)}</span>'
                for line in lines]
    # Lines are blocks (for full-width colour), so no newline between them.
    return Markup('<pre class="diff">' + "".join(rendered) + "</pre>")


def _line_class(line: str) -> str:
    if line.startswith(("---", "+++")):
        return "diff-file"
    if line.startswith("@@"):
        return "diff-hunk"
    if line.startswith("+"):
        return "diff-add"
    if line.startswith("-"):
        return "diff-del"
    return "diff-context"
