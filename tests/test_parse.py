import ast
import random
import textwrap

import pytest

from kernelevo.errors import ConfigError
from kernelevo.propose.parse import parse_answer

PARENT = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl

    BLOCK = 1024


    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(y_ptr + offsets, x * 2.0, mask=mask)


    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            y = torch.empty_like(x)
            n = x.numel()
            scale_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=4)
            return y
""")
FULL = PARENT.replace("BLOCK = 1024", "BLOCK = 2048")


def fenced(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```\n"


def edit(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


# Full answers ---------------------------------------------------------------------------

def test_full_answer_in_a_python_fence():
    parsed = parse_answer("Bigger blocks halve the launches.\n\n" + fenced(FULL), PARENT, "rewrite")
    assert (parsed.source, parsed.kind, parsed.error) == (FULL, "full", None)


def test_last_block_defining_modelnew_wins():
    older = FULL.replace("2048", "4096")
    answer = ("First try:\n" + fenced(older) + "Better:\n" + fenced(FULL, "py")
              + "Usage:\n" + fenced("model = ModelNew()\n")
              + fenced("class ModelNew: pass\n", "cpp"))
    assert parse_answer(answer, PARENT, "rewrite").source == FULL


@pytest.mark.parametrize("tag", ["", "py", "Python", "python3"])
def test_fence_labels_accepted(tag):
    assert parse_answer(fenced(FULL, tag), PARENT, "rewrite").source == FULL


def test_tilde_fence_and_bare_code_are_accepted():
    assert parse_answer(f"~~~python\n{FULL}~~~\n", PARENT, "rewrite").source == FULL
    assert parse_answer(FULL, PARENT, "rewrite").source == FULL


def test_full_answer_to_a_diff_prompt_is_taken_as_full():
    parsed = parse_answer("A rewrite works better here:\n" + fenced(FULL), PARENT, "diff")
    assert (parsed.source, parsed.kind, parsed.error) == (FULL, "full", None)


def test_full_answer_with_a_syntax_error_reports_the_line():
    broken = FULL.replace("n = x.numel()", "n = x.numel(")
    parsed = parse_answer(fenced(broken), PARENT, "rewrite")
    assert parsed.source is None and parsed.kind == "full"
    assert "not valid Python: line" in parsed.error


def test_full_answer_identical_to_parent_is_refused():
    parsed = parse_answer(fenced(PARENT), PARENT, "rewrite")
    assert parsed.source is None and "parent unchanged" in parsed.error


# Diff answers ---------------------------------------------------------------------------

def test_one_edit_block():
    answer = "Use bigger blocks.\n" + edit("BLOCK = 1024\n", "BLOCK = 2048\n")
    parsed = parse_answer(answer, PARENT, "diff")
    assert (parsed.source, parsed.kind, parsed.error) == (FULL, "diff", None)
    assert parsed.edits_applied == 1


def test_several_edit_blocks_inside_a_fence():
    launch = "        scale_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps={})\n"
    answer = fenced(edit("BLOCK = 1024\n", "BLOCK = 4096\n")
                    + "\n" + edit("        tl.store(y_ptr + offsets, x * 2.0, mask=mask)\n",
                                  "        tl.store(y_ptr + offsets, x + x, mask=mask)\n")
                    + edit("    " + launch.format(4), "    " + launch.format(8)))
    parsed = parse_answer(answer, PARENT, "diff")
    assert parsed.error is None and parsed.edits_applied == 3
    assert "BLOCK = 4096" in parsed.source and "x + x" in parsed.source
    assert "num_warps=8)" in parsed.source and "num_warps=4" not in parsed.source


def test_whitespace_tolerant_match_keeps_the_parents_indentation():
    # The model dropped one indentation level and added trailing spaces.
    search = "y = torch.empty_like(x)   \nn = x.numel()\n"
    replace = "y = torch.empty_like(x)\nn = x.numel()\nassert n > 0\n"
    parsed = parse_answer(edit(search, replace), PARENT, "repair")
    assert parsed.error is None and parsed.kind == "diff"
    assert "        n = x.numel()\n        assert n > 0\n" in parsed.source
    ast.parse(parsed.source)


def test_extra_indentation_in_the_search_is_removed_from_the_replacement():
    search = "        BLOCK = 1024\n"
    parsed = parse_answer(edit(search, "        BLOCK = 512\n"), PARENT, "diff")
    assert parsed.error is None and "\nBLOCK = 512\n" in parsed.source


def test_ambiguous_match_is_an_error():
    twice = PARENT + "\n\ndef extra():\n    return 2.0\n\n\ndef other():\n    return 2.0\n"
    parsed = parse_answer(edit("    return 2.0\n", "    return 3.0\n"), twice, "diff")
    assert parsed.source is None
    assert parsed.error.startswith("SEARCH/REPLACE block 1 (SEARCH starting `return 2.0`)")
    assert "matches the parent 2 times (at lines 29, 33)" in parsed.error
    # Without its indentation the line still matches twice, and is still refused.
    parsed = parse_answer(edit("return 2.0\n", "return 3.0\n"), twice, "diff")
    assert parsed.source is None and "matches the parent 2 times" in parsed.error


def test_missing_match_names_the_block_and_its_first_line():
    answer = (edit("BLOCK = 1024\n", "BLOCK = 2048\n")
              + edit("    def forward(self, x, scale):\n        pass\n", "    pass\n"))
    parsed = parse_answer(answer, PARENT, "diff")
    assert parsed.source is None and parsed.kind == "diff" and parsed.edits_applied == 0
    assert "block 2 (SEARCH starting `def forward(self, x, scale):`)" in parsed.error
    assert "does not match the parent" in parsed.error


def test_diff_that_breaks_the_syntax_is_an_error():
    parsed = parse_answer(edit("        n = x.numel()\n", "        n = x.numel(\n"), PARENT, "diff")
    assert parsed.source is None and parsed.kind == "diff"
    assert parsed.error.startswith("the edited file is not valid Python: line")


def test_empty_search_and_incomplete_blocks_are_errors():
    parsed = parse_answer(edit("\n", "BLOCK = 1\n"), PARENT, "diff")
    assert "block 1" in parsed.error and "SEARCH section is empty" in parsed.error
    cut = edit("BLOCK = 1024\n", "BLOCK = 2048\n") + "<<<<<<< SEARCH\n    def forward(self, x):\n"
    parsed = parse_answer(cut, PARENT, "diff")
    assert parsed.source is None and "block 2 is incomplete" in parsed.error
    no_divider = "<<<<<<< SEARCH\nBLOCK = 1024\n>>>>>>> REPLACE\n" + edit("n = 1\n", "n = 2\n")
    assert "block 1 is incomplete" in parse_answer(no_divider, PARENT, "diff").error


def test_edit_answer_to_a_rewrite_prompt_is_applied():
    parsed = parse_answer(edit("BLOCK = 1024\n", "BLOCK = 2048\n"), PARENT, "rewrite")
    assert (parsed.source, parsed.kind) == (FULL, "diff")


# Malformed answers ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["rewrite", "diff", "repair"])
@pytest.mark.parametrize("text", ["", "   \n", None], ids=["empty", "blank", "none"])
def test_empty_answers(mode, text):
    parsed = parse_answer(text, PARENT, mode)
    assert parsed.source is None and "the answer was empty" in parsed.error


def test_prose_only_and_missing_modelnew():
    parsed = parse_answer("I would increase the block size to 2048.", PARENT, "rewrite")
    assert parsed.source is None and "contains no code" in parsed.error
    parsed = parse_answer(fenced("def helper():\n    return 1\n"), PARENT, "diff")
    assert parsed.source is None and "none defines `class ModelNew`" in parsed.error
    parsed = parse_answer(fenced(FULL.replace("class ModelNew", "class Model")), PARENT, "rewrite")
    assert "none defines `class ModelNew`" in parsed.error
    nested = "def make():\n    class ModelNew:\n        pass\n    return ModelNew\n"
    parsed = parse_answer(fenced(nested), PARENT, "rewrite")
    assert "defines no top-level `class ModelNew`" in parsed.error


def test_unterminated_fence():
    cut = "```python\n" + FULL[: FULL.index("return y")] + "return (y"
    parsed = parse_answer(cut, PARENT, "rewrite")
    assert parsed.source is None and "the answer may have been cut off" in parsed.error
    # A closing fence the model forgot costs nothing when the code itself is whole.
    assert parse_answer("```python\n" + FULL, PARENT, "rewrite").source == FULL


def test_crlf_answer_and_parent():
    crlf_parent = PARENT.replace("\n", "\r\n")
    parsed = parse_answer(edit("BLOCK = 1024\n", "BLOCK = 2048\n").replace("\n", "\r\n"),
                          crlf_parent, "diff")
    assert parsed.source == FULL
    parsed = parse_answer(("Here:\n" + fenced(FULL)).replace("\n", "\r\n"), crlf_parent, "rewrite")
    assert parsed.source == FULL and "\r" not in parsed.source


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="mutation mode 'mutate'"):
        parse_answer(fenced(FULL), PARENT, "mutate")


def test_random_garbage_never_raises():
    pieces = ["```", "```python\n", "~~~\n", "<<<<<<< SEARCH\n", "=======\n", ">>>>>>> REPLACE\n",
              "class ModelNew(nn.Module):\n", "    pass\n", "BLOCK = 1024\n", "\r\n", "(",
              "\x00", "def f(:\n", "text ", "\n"]
    rng = random.Random(3)
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        parsed = parse_answer(text, PARENT, rng.choice(["rewrite", "diff", "repair"]))
        assert (parsed.source is None) == (parsed.error is not None)
        if parsed.source is not None:
            ast.parse(parsed.source)
