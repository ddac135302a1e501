"""Turn a model's answer into a candidate source: a full file or edits to the parent.

Nothing here raises on what the model wrote. Every failure comes back as a
`Parsed` with an error phrased for the model, so the repair step can quote it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kernelevo.errors import ConfigError
from kernelevo.parsing import parse_source

MODES = ("rewrite", "diff", "repair")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w.+-]*)")
_PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3"})
_MODELNEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.M)
_SEARCH_MARK = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH\b", re.M)
_BLOCK = re.compile(
    r"^[ \t]*<{5,9}[ \t]*SEARCH\b[^\n]*\n(.*?)"  # the SEARCH lines
    r"^[ \t]*={5,9}[ \t]*\n(.*?)"  # the REPLACE lines
    r"^[ \t]*>{5,9}[ \t]*REPLACE\b",
    re.M | re.S)
_SNIPPET_CHARS = 80
_FULL_FORMAT = "the complete file in a single ```python block that defines `class ModelNew`"
_DIFF_FORMAT = ("<<<<<<< SEARCH / ======= / >>>>>>> REPLACE blocks whose SEARCH lines are "
                "copied exactly from the parent")


@dataclass(frozen=True)
class Parsed:
    """The outcome of reading one answer; `source` is None exactly when `error` is set."""

    source: str | None
    kind: str
    error: str | None
    edits_applied: int = 0


def parse_answer(text: str, parent_source: str, mode: str) -> Parsed:
    """The new candidate source from a model's answer to a `mode` prompt."""
    if mode not in MODES:
        raise ConfigError(f"mutation mode {mode!r}: use one of {', '.join(MODES)}")
    text = _normalise(text or "")
    parent = _normalise(parent_source)
    expected = "full" if mode == "rewrite" else "diff"
    if not text.strip():
        return Parsed(None, expected, "the answer was empty; answer with "
                      + (_FULL_FORMAT if mode == "rewrite" else _DIFF_FORMAT))
    has_edits = bool(_SEARCH_MARK.search(text))
    full = _full_source(text)
    # A diff prompt may get a whole file back and a rewrite prompt edits: use what came.
    if has_edits and (mode != "rewrite" or full is None):
        return _apply_edits(text, parent)
    if full is not None:
        source, closed = full
        return _checked(source, "full", parent, 0, "" if closed else
                        " (the code block is not closed: the answer may have been cut off)")
    wanted = _FULL_FORMAT if mode == "rewrite" else f"{_DIFF_FORMAT}, or {_FULL_FORMAT}"
    found = "code blocks, but none defines `class ModelNew`" if _fences(text) else "no code"
    return Parsed(None, expected, f"the answer contains {found}; answer with {wanted}")


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# Full files ----------------------------------------------------------------------------

def _fences(text: str) -> list[tuple[str, str, bool]]:
    """Fenced blocks as (language tag, body, closed); an unclosed fence runs to the end."""
    blocks: list[tuple[str, str, bool]] = []
    opened: tuple[str, str] | None = None
    body: list[str] = []
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if opened is None:
            if match:
                opened, body = (match.group(1), match.group(2).lower()), []
            continue
        if _closes(line, opened[0]):
            blocks.append((opened[1], "\n".join(body), True))
            opened = None
        else:
            body.append(line)
    if opened is not None:
        blocks.append((opened[1], "\n".join(body), False))
    return blocks


def _closes(line: str, fence: str) -> bool:
    # As in CommonMark: only fence characters, at least as many as opened the block.
    mark = line.strip()
    return mark.startswith(fence) and not mark.strip(fence[0])


def _full_source(text: str) -> tuple[str, bool] | None:
    """The last Python block that defines ModelNew (not edit blocks), with whether it closed."""
    blocks = _fences(text)
    whole = [(body, closed) for tag, body, closed in blocks if tag in _PYTHON_TAGS
             and _MODELNEW.search(body) and not _SEARCH_MARK.search(body)]
    if whole:
        return whole[-1]
    # Some models answer with bare code and no fence at all.
    if not blocks and _MODELNEW.search(text) and _syntax_error(text) is None:
        return text, True
    return None


# Edits ---------------------------------------------------------------------------------

def _apply_edits(text: str, parent: str) -> Parsed:
    blocks = list(_BLOCK.finditer(text))
    unfinished = _unfinished_block(text, blocks)
    if unfinished is not None:
        return Parsed(None, "diff", f"SEARCH/REPLACE block {unfinished} is incomplete: it lacks "
                      "the ======= line or the >>>>>>> REPLACE line (the answer may have been "
                      "cut off); give every block all three marker lines")
    lines = parent.split("\n")
    for number, block in enumerate(blocks, start=1):
        search, replace = _section_lines(block.group(1)), _section_lines(block.group(2))
        result = _replace_once(lines, search, replace)
        if isinstance(result, str):
            first = next((line.strip() for line in search if line.strip()), "")
            return Parsed(None, "diff", f"SEARCH/REPLACE block {number} (SEARCH starting "
                          f"`{first[:_SNIPPET_CHARS]}`): {result}")
        lines = result
    return _checked("\n".join(lines), "diff", parent, len(blocks), "")


def _unfinished_block(text: str, blocks: list[re.Match[str]]) -> int | None:
    """The number of the first SEARCH marker that starts no complete block of its own."""
    starts = [match.start() for match in _SEARCH_MARK.finditer(text)]
    # A block missing its divider swallows the next block's markers into its sections.
    whole = {block.start() for block in blocks
             if not _SEARCH_MARK.search(block.group(1) + block.group(2))}
    return next((number for number, start in enumerate(starts, start=1)
                 if start not in whole), None)


def _section_lines(section: str) -> list[str]:
    return section[:-1].split("\n") if section else []


def _replace_once(lines: list[str], search: list[str], replace: list[str]) -> list[str] | str:
    """The lines with the one match of `search` replaced, or why that was impossible."""
    if not any(line.strip() for line in search):
        return "the SEARCH section is empty; copy the parent lines to be replaced into it"
    exact = [i for i in range(len(lines) - len(search) + 1) if lines[i:i + len(search)] == search]
    if len(exact) == 1:
        start = exact[0]
        return lines[:start] + replace + lines[start + len(search):]
    if len(exact) > 1:
        return _ambiguous(exact)
    # Models often drop trailing spaces, blank edge lines or a level of indentation.
    search = _strip_blank_edges(search)
    loose = [(i, shift) for i in range(len(lines) - len(search) + 1)
             if (shift := _indent_shift(lines[i:i + len(search)], search)) is not None]
    if len(loose) > 1:
        return _ambiguous([i for i, _ in loose])
    if not loose:
        return ("it does not match the parent; copy the SEARCH lines exactly from the parent, "
                "with their indentation" + _near_miss(lines, search))
    start, shift = loose[0]
    return lines[:start] + [_shifted(line, shift) for line in replace] + lines[start + len(search):]


def _ambiguous(starts: list[int]) -> str:
    where = ", ".join(str(i + 1) for i in starts[:5])
    return (f"it matches the parent {len(starts)} times (at lines {where}); include more "
            "surrounding lines so it matches exactly one place")


def _near_miss(lines: list[str], search: list[str]) -> str:
    first = search[0].strip() if search else ""
    hits = [i for i, line in enumerate(lines) if first and line.strip() == first]
    return f" (its first line appears at parent line {hits[0] + 1}, the lines after it differ)" \
        if hits else " (not even its first line appears in the parent)"


def _strip_blank_edges(search: list[str]) -> list[str]:
    start, end = 0, len(search)
    while start < end and not search[start].strip():
        start += 1
    while end > start and not search[end - 1].strip():
        end -= 1
    return search[start:end]


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _indent_shift(window: list[str], search: list[str]) -> str | None:
    """'+X' if the parent lines are the search lines indented by X, '-X' if dedented, else None."""
    shift: str | None = None
    for parent_line, search_line in zip(window, search):
        parent_line, search_line = parent_line.rstrip(), search_line.rstrip()
        if not parent_line and not search_line:
            continue
        parent_indent, search_indent = _indent(parent_line), _indent(search_line)
        if parent_line[len(parent_indent):] != search_line[len(search_indent):]:
            return None
        if parent_indent.endswith(search_indent):
            this = "+" + parent_indent[:len(parent_indent) - len(search_indent)]
        elif search_indent.endswith(parent_indent):
            this = "-" + search_indent[:len(search_indent) - len(parent_indent)]
        else:
            return None
        if shift is not None and this != shift:
            return None
        shift = this
    return shift


def _shifted(line: str, shift: str) -> str:
    if not line.strip():
        return ""
    sign, amount = shift[0], shift[1:]
    if sign == "+":
        return amount + line
    return line[len(amount):] if line.startswith(amount) else line.lstrip()


# Checks --------------------------------------------------------------------------------

def _syntax_error(source: str) -> str | None:
    try:
        parse_source(source)
    except SyntaxError as exc:
        code = (exc.text or "").strip()
        return f"line {exc.lineno}: {exc.msg}" + (f": `{code}`" if code else "")
    except (ValueError, RecursionError, MemoryError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _checked(source: str, kind: str, parent: str, edits: int, hint: str) -> Parsed:
    """Accept a source only if it is Python, defines ModelNew and differs from the parent."""
    source = source.strip("\n") + "\n"
    problem = _syntax_error(source)
    what = "the edited file" if kind == "diff" else "the file"
    if problem is not None:
        return Parsed(None, kind, f"{what} is not valid Python: {problem}{hint}")
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew"
               for node in parse_source(source).body):
        return Parsed(None, kind, f"{what} defines no top-level `class ModelNew`{hint}")
    if source.strip() == parent.strip():
        return Parsed(None, kind, f"{what} is the parent unchanged; propose a real change")
    return Parsed(source, kind, None, edits)
