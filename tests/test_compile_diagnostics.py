"""A failed build's verdict starts with the compiler's first error, not a traceback or warnings."""

from __future__ import annotations

from kernelevo.evaluate.cuda.diagnostics import first_compile_error, with_first_error

# As torch's load_inline raises it on a GPU machine: ninja's output inside a traceback,
# a header's warnings first.
LOAD_INLINE = """Traceback (most recent call last):
  File "/usr/lib/python3.12/site-packages/torch/utils/cpp_extension.py", line 2506, in _run_ninja_build
RuntimeError: Error building extension 'ke_relu': [1/3] /usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=ke_relu -Werror=return-type -c /tmp/kernelevo-x1/work/cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/usr/lib/python3.12/site-packages/torch/include/c10/core/AutogradState.h(89): warning #3306-D: a default bit-field initializer is a C++20 feature
    bool view_replay_enabled_ : 1 = false;
                                  ^
/tmp/kernelevo-x1/work/cuda.cu(14): error: expected a ";"
          y[i] = v > 0.0f ? v : 0.0f;
          ^
/tmp/kernelevo-x1/work/cuda.cu(20): error: identifier "n" is undefined
2 errors detected in the compilation of "/tmp/kernelevo-x1/work/cuda.cu".
ninja: build stopped: subcommand failed.
"""


def test_nvccs_first_error_with_its_source_line_and_caret():
    assert first_compile_error(LOAD_INLINE) == (
        'cuda.cu(14): error: expected a ";"\n'
        "          y[i] = v > 0.0f ? v : 0.0f;\n"
        "          ^")


def test_gcc_and_linker_errors_are_found_too():
    gcc = "main.cpp: In function 'f':\n/tmp/b/main.cpp:3:10: fatal error: foo.h: No such file"
    assert first_compile_error(gcc) == "main.cpp:3:10: fatal error: foo.h: No such file"
    ld = "/usr/bin/ld: ke.o: in function `run':\nke.cu:(.text+0x1f): undefined reference to `g'"
    assert "undefined reference to `g'" in first_compile_error(ld)


def test_a_log_without_a_diagnostic_is_left_as_it_is():
    text = "Traceback (most recent call last):\nRuntimeError: ninja is required"
    assert first_compile_error(text) == ""
    assert with_first_error("the message", text) == "the message"
    assert with_first_error("the message", LOAD_INLINE).startswith(
        'first error: cuda.cu(14): error: expected a ";"\n')
    assert with_first_error("the message", LOAD_INLINE).endswith("\n\nthe message")
