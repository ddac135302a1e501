import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelevo.errors import ConfigError
from kernelevo.evaluate.verdict import ErrorMetrics, TimingStats, Verdict, verdict_for
from kernelevo.propose.prompt import (
    MODES, Exemplar, PromptRequest, build_messages, choose_mode, feedback, summary, trim_log,
)

ROOT = Path(__file__).resolve().parent.parent

TASK = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0

    def get_inputs():
        return [torch.randn(1024, 4096)]

    def get_init_inputs():
        return []
""")

PARENT = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl

    @triton.jit
    def relu_twice_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(y_ptr + offsets, tl.maximum(x, 0.0) * 2.0, mask=mask)

    class ModelNew(nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            relu_twice_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
            return y
""")

INCORRECT = Verdict(
    status="incorrect", reason="output_mismatch", message="output 0 differs on input set 2",
    errors=ErrorMetrics(max_abs_error=0.03125, max_rel_error=0.5, mismatch_fraction=0.125,
                        rel_l2_error=0.0301, worst_index=(3, 17), worst_value=1.25,
                        worst_expected=1.21875, atol=1e-4, rtol=1e-4))
OK = Verdict(
    status="ok", reason="passed",
    timings={"candidate": TimingStats(0.1234, 0.0011, 0.12, 100),
             "eager": TimingStats(0.2468, 0.0021, 0.24, 100),
             "compile": TimingStats(0.15, 0.0013, 0.14, 100)},
    speedup_vs_eager=2.0, speedup_vs_compile=1.2156,
    flags=("timed_to_device_idle",),
    notes=("own kernels: 97% of GPU kernel time", "physical floor 0.0300 ms (memory-bound)"))

COMPILER_ERROR = 'relu.cu(42): error: identifier "undeclared_thing" is undefined'
NOISY_LOG = "\n".join(
    ["Using /tmp/torch_extensions as PyTorch extensions root...",
     "Emitting ninja build file /tmp/torch_extensions/relu/build.ninja...",
     "Building extension module relu..."]
    + [f"[{i}/3] /usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=relu " + "-I/include " * 60
       for i in (1, 2)]
    + [f"In file included from /site-packages/torch/include/ATen/header_{i}.h:{i},"
       for i in range(80)]
    + ["                 from /site-packages/torch/include/torch/extension.h:5:"] * 40
    + [COMPILER_ERROR, "      undeclared_thing(x);", "      ^"]
    + [f"relu.cu({50 + i}): warning: variable unused_{i} was declared but never referenced"
       for i in range(150)]
    + ["1 error detected in the compilation of \"relu.cu\".",
       "ninja: build stopped: subcommand failed.",
       "Traceback (most recent call last):", '  File "candidate.py", line 30, in <module>',
       "RuntimeError: Error building extension 'relu'"])
COMPILE_ERROR = verdict_for("compile_failed", "building the CUDA extension failed", logs=NOISY_LOG)


def request(backend="triton", mode="rewrite", inspirations=(), precision="fp32", verdict=INCORRECT):
    return PromptRequest(task_source=TASK, backend=backend, precision=precision, mode=mode,
                         parent=Exemplar("parent-7", PARENT, verdict), inspirations=inspirations)


INSPIRATIONS = (Exemplar("fast-3", PARENT.replace("1024", "4096"), OK),
                Exemplar("broken-5", PARENT.replace("2.0", "3.0"), COMPILE_ERROR))


@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("inspirations", [(), INSPIRATIONS], ids=["alone", "inspired"])
def test_templates_render_for_every_backend_and_mode(backend, mode, inspirations):
    messages = build_messages(request(backend, mode, inspirations))
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert "class ModelNew" in system and "torch.manual_seed(42)" in system
    assert "try" in system and "lru_cache" in system and "streams" in system
    assert "tl.dot" in system if backend == "triton" else "getCurrentCUDAStream" in system
    assert TASK.strip() in user and PARENT.strip() in user
    assert "index (3, 17)" in user
    assert ("<<<<<<< SEARCH" in user) == (mode != "rewrite")
    assert ("# Other candidates" in user) == bool(inspirations)
    if inspirations:
        assert "fast-3" in user and "ok, 0.1234 ms, 2.00x vs eager" in user
        assert "broken-5`: compile_error (compile_failed)" in user
    # Nothing left unrendered, and block tags leave no blank-line runs behind.
    assert "{{" not in system + user and "{%" not in system + user
    assert "\n\n\n" not in system and "\n\n\n" not in user.replace(TASK.strip(), "")


def test_mode_instructions_differ():
    texts = {mode: build_messages(request(mode=mode))[1]["content"] for mode in MODES}
    assert "substantially faster" in texts["rewrite"]
    assert "focused change" in texts["diff"]
    assert "Fix the failure shown above" in texts["repair"]


def test_precision_shapes_the_guidance():
    fp32 = build_messages(request(precision="fp32"))[0]["content"]
    fp16 = build_messages(request(precision="fp16"))[0]["content"]
    assert 'input_precision="ieee"' in fp32 and "atol = 0.0001" in fp32
    assert 'input_precision="ieee"' not in fp16 and "atol = 0.01" in fp16
    cuda = build_messages(request(backend="cuda"))[0]["content"]
    assert "Do not pass `--use_fast_math`" in cuda and "AT_DISPATCH" in cuda
    assert "sm_90" in cuda and "C10_CUDA_KERNEL_LAUNCH_CHECK" in cuda


def test_feedback_for_incorrect_says_where_and_how_large():
    text = feedback(INCORRECT)
    assert text.startswith("status: incorrect (output_mismatch: values differ")
    assert "output 0 differs on input set 2" in text
    assert "max abs error 0.03125" in text and "max rel error 0.5" in text
    assert "12.50% of elements" in text and "relative L2 error 0.0301" in text
    assert "index (3, 17): got 1.25, expected 1.21875" in text
    assert "atol 0.0001" in text and "rtol 0.0001" in text


def test_feedback_for_ok_gives_times_and_speedups():
    text = feedback(OK)
    assert "): 0.1234 ms median (IQR 0.0011 ms, 100 samples)" in text
    # The model is told which measure it is asked to lower.
    measure = {"call": "call time", "gpu": "GPU time", "": "GPU time"}[OK.timing_measure]
    assert f"time ({measure}" in text
    assert "PyTorch eager: 0.2468 ms median" in text and "speedup 2.00x" in text
    assert "torch.compile: 0.1500 ms median" in text and "speedup 1.22x" in text
    assert "note: own kernels: 97% of GPU kernel time" in text
    assert "note: physical floor 0.0300 ms" in text and "flag: timed_to_device_idle" in text


def test_feedback_trims_a_noisy_compiler_log():
    text = feedback(COMPILE_ERROR, max_log_chars=3000)
    assert "compile_error (compile_failed" in text and "building the CUDA extension failed" in text
    assert COMPILER_ERROR in text and "      ^" in text
    assert "RuntimeError: Error building extension 'relu'" in text
    assert "[1/3]" not in text and "In file included from" not in text
    assert "Emitting ninja" not in text and "unused_" not in text
    assert len(text) < 600 < 3000 < len(NOISY_LOG)


def test_trim_log_keeps_first_errors_and_tail_within_budget():
    log = "\n".join([f"starting {i}" for i in range(3)]
                    + ["kernel.py:10: error: first failure", "context a", "context b"]
                    + [f"step {i}: still running" for i in range(500)] + ["the very end"])
    trimmed = trim_log(log, max_chars=1000)
    assert len(trimmed) <= 1000
    assert trimmed.startswith("[... 3 lines omitted ...]\nkernel.py:10: error: first failure")
    assert "context b\n[... " in trimmed
    assert trimmed.endswith("step 499: still running\nthe very end")


def test_trim_log_keeps_short_logs_whole_and_cuts_long_lines():
    assert trim_log("line one\r\nline two\n\n") == "line one\nline two"
    trimmed = trim_log("x" * 5000, max_chars=3000)
    assert len(trimmed) < 400 and trimmed.endswith("[...]")


def test_feedback_for_rejection_and_missing_verdict():
    rejected = verdict_for("try_fallback", "line 12: try statement in forward")
    text = feedback(rejected)
    assert "rejected (try_fallback: try/except around the computation" in text
    assert "line 12: try statement in forward" in text
    assert feedback(None) == "status: not evaluated yet"
    assert summary(None) == "not evaluated"
    assert summary(INCORRECT) == "incorrect (output_mismatch), max abs error 0.0312"


def test_custom_directory_overrides_one_template(tmp_path):
    (tmp_path / "triton.j2").write_text("## House rules for {{ gpu_name }}: BLOCK is 256.\n")
    system, user = (m["content"] for m in build_messages(request(), templates_dir=tmp_path))
    assert "## House rules for NVIDIA H200: BLOCK is 256." in system
    assert "Triton guidance" not in system and "## Honesty rules" in system
    assert user == build_messages(request())[1]["content"]


def test_undefined_variable_names_the_template(tmp_path):
    (tmp_path / "user.j2").write_text("Task:\n{{ task_source }}\n{{ no_such_variable }}\n")
    with pytest.raises(ConfigError, match=r"user\.j2, line 3: 'no_such_variable' is undefined"):
        build_messages(request(), templates_dir=tmp_path)


def test_broken_included_template_is_named(tmp_path):
    (tmp_path / "cuda.j2").write_text("CUDA {{ gpu_name }} {{ parent.id }}\n")
    with pytest.raises(ConfigError, match=r"cuda\.j2, line 1: 'parent' is undefined"):
        build_messages(request(backend="cuda"), templates_dir=tmp_path)


def test_template_syntax_error_names_file_and_line(tmp_path):
    (tmp_path / "system.j2").write_text("fine\n{% if backend %}\nunclosed\n")
    with pytest.raises(ConfigError, match=r"system\.j2, line \d"):
        build_messages(request(), templates_dir=tmp_path)


def test_bad_settings_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        build_messages(request(), templates_dir=tmp_path / "missing")
    with pytest.raises(ConfigError, match="mutation mode 'mutate'"):
        request(mode="mutate")
    with pytest.raises(ConfigError, match="prompt backend 'pytorch'"):
        request(backend="pytorch")
    with pytest.raises(ConfigError, match="precision 'fp8'"):
        request(precision="fp8")


def test_templates_load_from_a_plain_source_checkout(tmp_path):
    shutil.copytree(ROOT / "src" / "kernelevo", tmp_path / "kernelevo",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = ("import kernelevo; from kernelevo.propose.prompt import *\n"
              "r = PromptRequest('T', 'cuda', 'bf16', 'repair', Exemplar('p', 'P', None))\n"
              "print(kernelevo.__file__); print(build_messages(r)[0]['content'])")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env={"PYTHONPATH": str(tmp_path)}, cwd=tmp_path, check=True)
    assert result.stdout.startswith(str(tmp_path / "kernelevo"))
    assert "CUDA guidance" in result.stdout and "bf16 data: use tensor cores" in result.stdout


@pytest.mark.parametrize("status,reason", [
    ("compile_error", "compile_failed"), ("runtime_error", "cuda_error"),
    ("incorrect", "output_mismatch"), ("crashed", "killed_by_signal"),
    ("timeout", "wall_clock_limit")])
def test_failed_parents_are_repaired(status, reason):
    verdict = verdict_for(reason)
    assert verdict.status == status
    rng = random.Random(0)
    assert {choose_mode(verdict, rng) for _ in range(50)} == {"repair"}


@pytest.mark.parametrize("verdict", [OK, None, verdict_for("ghost_kernel")],
                         ids=["ok", "unevaluated", "rejected"])
def test_other_parents_are_rewritten_or_diffed_at_the_given_rate(verdict):
    rng = random.Random(1234)
    draws = [choose_mode(verdict, rng, diff_probability=0.3) for _ in range(4000)]
    assert set(draws) == {"rewrite", "diff"}
    assert 0.27 < draws.count("diff") / len(draws) < 0.33
    assert {choose_mode(verdict, rng, 0.0) for _ in range(200)} == {"rewrite"}
    assert {choose_mode(verdict, rng, 1.0) for _ in range(200)} == {"diff"}


def test_choose_mode_is_reproducible_and_checks_its_probability():
    first = [choose_mode(OK, random.Random(7)) for _ in range(20)]
    again = [choose_mode(OK, random.Random(7)) for _ in range(20)]
    assert first == again
    with pytest.raises(ConfigError, match="diff_probability=1.5"):
        choose_mode(OK, random.Random(0), diff_probability=1.5)
