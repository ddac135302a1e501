"""The candidate's view of `load_inline`: cached by source hash, instrumented, or compile-checked.

Inside the worker, `torch.utils.cpp_extension.load_inline` is replaced so that
(1) the extension name carries a hash of everything that determines the build
    (sources, flags, target arch, torch, CUDA and Python versions), so an
    unchanged candidate is never compiled twice and two different candidates
    never share a build folder;
(2) every `__global__` function starts with a check of a device flag, which
    lets the judge switch the candidate's kernels off (the ghost-kernel test);
(3) without a GPU the CUDA source is only compiled with nvcc, if present;
(4) builds go through the compiler stand-ins of `cuda_shims` (a precompiled
    torch/extension.h for the host file; nvcc's host and device front ends run
    at once), which change how long a build takes, not what it makes
    (`cuda_compilers` installs them).
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelevo.cache_dir import cache_key
from kernelevo.evaluate.cuda.compilers import compiler_shims, extensions_root
from kernelevo.evaluate.cuda.shims_nvcc import compile_cuda
from kernelevo.evaluate.cuda.shims_shared import SIBLING_FAILED, STOPPED

# load_inline arguments that change what it prints, not what it builds.
_NOT_IN_THE_BUILD = frozenset({"verbose", "keep_intermediates"})
_MISSING_HEADER = re.compile(r"fatal error: ([\w./]+): No such file or directory")
_GLOBAL_BODY = re.compile(r"(__global__\b[^;{]*?\{)")
_FLAG = "kernelevo_knockout_flag"
_SETTER = "kernelevo_set_knockout"
_PRELUDE = f"__device__ int {_FLAG} = 0;\n"
_SETTER_SOURCE = f"""
void {_SETTER}(int64_t value) {{
    int flag = static_cast<int>(value);
    cudaMemcpyToSymbol({_FLAG}, &flag, sizeof(int));
}}
"""


class CompileOnly(Exception):
    """Raised in place of a build without a GPU; carries the nvcc outcome."""

    def __init__(self, ok: bool, log: str) -> None:
        super().__init__(log)
        self.ok = ok
        self.log = log


def _as_list(sources: Any) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else list(sources)


def instrument(cuda_sources: list[str]) -> list[str] | None:
    """Sources with the knockout check in each kernel, or None if no kernel was found."""
    if not cuda_sources or not any(_GLOBAL_BODY.search(s) for s in cuda_sources):
        return None
    body = [_GLOBAL_BODY.sub(lambda m: m.group(1) + f" if ({_FLAG}) return; ", s)
            for s in cuda_sources]
    return [_PRELUDE + body[0], *body[1:], _SETTER_SOURCE]


class LoadInlineHook:
    """Replaces load_inline in this process; records builds and knockout setters."""

    def __init__(self, has_gpu: bool, switch: Any) -> None:
        from torch.utils import cpp_extension

        self._module = cpp_extension
        self._original = cpp_extension.load_inline
        # Positions as this torch orders them (2.7 put sycl_sources before functions);
        # a hook already in place knows them.
        below = getattr(self._original, "__self__", None)
        self._signature: inspect.Signature = (
            below._signature if isinstance(below, LoadInlineHook)
            else inspect.signature(self._original))
        self._has_gpu = has_gpu
        self._switch = switch
        self.build_s = 0.0
        self.instrumented = 0
        self.uninstrumented = 0
        cpp_extension.load_inline = self.load_inline

    def load_inline(self, name: str, cpp_sources: Any, *args: Any, **kwargs: Any) -> Any:
        """torch's load_inline through the shared cache, its arguments bound as torch binds them."""
        kwargs = self._signature.bind(name, cpp_sources, *args, **kwargs).arguments
        del kwargs["name"], kwargs["cpp_sources"]
        cuda_sources, functions = kwargs.pop("cuda_sources", None), kwargs.pop("functions", None)
        cpp, cuda = _as_list(cpp_sources), _as_list(cuda_sources)
        if not self._has_gpu:
            raise CompileOnly(*nvcc_check(cuda)) if cuda else CompileOnly(True, "no CUDA source")
        kwargs.pop("build_directory", None)  # builds live in the shared, hash-keyed cache
        started = time.perf_counter()
        try:
            return self._build(name, cpp, cuda, functions, kwargs)
        finally:
            self.build_s += time.perf_counter() - started

    def _build(self, name: str, cpp: list[str], cuda: list[str], functions: Any,
               kwargs: dict[str, Any]) -> Any:
        names = [functions] if isinstance(functions, str) else functions
        instrumented = instrument(cuda) if cuda and isinstance(names, (list, tuple)) else None
        if instrumented is not None:
            declared = cpp + [f"void {_SETTER}(int64_t value);"]
            try:
                module = self._call(name, declared, instrumented, [*names, _SETTER], kwargs)
            except RuntimeError as exc:
                # Only a failure the instrumentation caused is worth a second
                # build: a broken source fails as written too, and its
                # message is the one to report (no second compile).
                if not _caused_by_instrumentation(str(exc)):
                    raise
                module = None
            if module is not None:
                self.instrumented += 1
                self._switch.cuda_setters.append(getattr(module, _SETTER))
                return module
        self.uninstrumented += 1
        return self._call(name, cpp, cuda, functions, kwargs)

    def _call(self, name: str, cpp: list[str], cuda: list[str], functions: Any,
              kwargs: dict[str, Any]) -> Any:
        unique = f"{name}_{build_key(cpp, cuda, functions, kwargs)}"
        failed = _failure_file(unique)
        if failed.is_file():  # built before (ahead, or by another run) and failed
            raise RuntimeError(f"Error building extension '{unique}' (the same source and "
                               f"flags failed before):\n{failed.read_text(errors='replace')}")
        # A mark left by an earlier build of this folder that was cut short
        # (not remembered above) would stop this one's compiles at once.
        (extensions_root() / unique / SIBLING_FAILED).unlink(missing_ok=True)
        try:
            with compiler_shims():
                return self._original(unique, cpp, cuda_sources=cuda or None,
                                      functions=functions, **kwargs)
        except RuntimeError as exc:
            _remember_failure(failed, str(exc))
            raise


def _caused_by_instrumentation(log: str) -> bool:
    return _FLAG in log or _SETTER in log


def _failure_file(unique: str) -> Path:
    """Where a failed build's log is kept, beside the builds, keyed as they are."""
    return extensions_root() / "kernelevo-failed" / f"{unique}.log"


def _remember_failure(path: Path, log: str) -> None:
    """Keep a compiler's verdict on a source, so it is never compiled again to fail again.

    Only a build the compiler or linker refused counts: a build cut short (a
    kill, a full disk), or one whose only error is a compile stopped for a
    failure beside it that left no message (a mark in the build folder the
    compilers did not make), says nothing about the source.
    """
    if "error" not in log.lower() or "No space left" in log or "Killed" in log:
        return
    if _only_stopped(log):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(log[-20000:])
        os.replace(partial, path)
    except OSError:
        pass  # a cache that cannot be written costs a rebuild, not a verdict


def _only_stopped(log: str) -> bool:
    """Whether a build's log holds no compiler error but compiles stopped for a sibling's."""
    if STOPPED not in log:
        return False
    return not any("error" in line.lower() and STOPPED not in line
                   and not line.lower().startswith("error building extension")
                   for line in log.splitlines())


def build_key(cpp: list[str], cuda: list[str], functions: Any, kwargs: dict[str, Any]) -> str:
    """Hash of everything a build depends on: sources, flags, target arch and toolchain.

    Stable across processes and runs (no object ids, no set order), so the
    same source built by another run or task is found in the shared cache.
    """
    import torch

    toolchain = (os.environ.get("TORCH_CUDA_ARCH_LIST"), torch.__version__, torch.version.cuda,
                 sys.version_info[:2])
    options = sorted((k, v) for k, v in kwargs.items() if k not in _NOT_IN_THE_BUILD)
    text = repr((cpp, cuda, functions, options, toolchain))
    return cache_key(text)


# Declarations torch's CUDA headers need from the CUDA math libraries, for a
# toolkit installed without them (a compile check links nothing, so the
# types are all it needs). Used only when nvcc reports one of them missing.
_LIBRARY_STUBS = {
    "cusparse.h": "typedef struct cusparseContext* cusparseHandle_t;\n"
                  "typedef enum { CUSPARSE_STATUS_SUCCESS = 0 } cusparseStatus_t;\n"
                  "const char* cusparseGetErrorString(cusparseStatus_t status);\n",
    "cublas_v2.h": "typedef struct cublasContext* cublasHandle_t;\n"
                   "typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;\n",
    "cublasLt.h": "typedef struct cublasLtContext* cublasLtHandle_t;\n",
    "cusolver_common.h": "typedef enum { CUSOLVER_STATUS_SUCCESS = 0,\n"
                         "               CUSOLVER_STATUS_INVALID_VALUE = 3 } cusolverStatus_t;\n",
    "cusolverDn.h": "#include <cusolver_common.h>\n"
                    "typedef struct cusolverDnContext* cusolverDnHandle_t;\n",
}


def nvcc_check(cuda_sources: list[str]) -> tuple[bool, str]:
    """Compile CUDA sources with nvcc against torch's headers; (ok, log).

    Where the toolkit lacks the math libraries' headers that torch includes,
    the check is made again with stand-ins declaring what torch uses of them.
    A candidate that includes one of those headers itself and uses more of it
    then fails the check: nothing here can tell what the real header holds.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompileOnly(False, "no nvcc")
    done, log = _nvcc(nvcc, cuda_sources, stubs=False)
    missing = _MISSING_HEADER.search(log)
    if done.returncode and missing and missing.group(1) in _LIBRARY_STUBS:
        done, log = _nvcc(nvcc, cuda_sources, stubs=True)
        missing = _MISSING_HEADER.search(log)
    include = str(Path(_torch_include()))
    if done.returncode and missing and include in log[: missing.start()]:
        # A header torch includes is absent from this CUDA install: the machine's
        # fault, not the candidate's, so the check is skipped rather than failed.
        raise CompileOnly(False, f"missing system header {missing.group(1)}")
    return done.returncode == 0, log


def _torch_include() -> Path:
    import torch

    return Path(torch.__file__).parent / "include"


def _nvcc(nvcc: str, cuda_sources: list[str], stubs: bool) -> tuple[Any, str]:
    import sysconfig

    include = _torch_include()
    with tempfile.TemporaryDirectory() as folder:
        stub = Path(folder) / "c10" / "cuda" / "impl"
        stub.mkdir(parents=True)
        # CPU builds of torch ship the CUDA headers without this generated one.
        (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
        for name, text in _LIBRARY_STUBS.items() if stubs else ():
            (Path(folder) / name).write_text("#pragma once\n" + text)
        source = Path(folder) / "candidate.cu"
        source.write_text("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
                          + "\n".join(cuda_sources))
        command = [nvcc, "-std=c++17", "-c", str(source), "-o", os.devnull,
                   f"-I{include}", f"-I{include / 'torch/csrc/api/include'}", f"-I{folder}",
                   f"-I{sysconfig.get_paths()['include']}",
                   "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC",
                   "-DTORCH_EXTENSION_NAME=candidate"]
        # The same nvcc commands, host and device front ends at once where possible.
        done = (compile_cuda(nvcc, command[1:])
                or subprocess.run(command, capture_output=True, text=True, timeout=600))
    return done, _errors_first(done.stdout + done.stderr)


def _errors_first(text: str, limit: int = 6000) -> str:
    """The compiler's error lines, then the tail: nvcc can echo a macro's whole
    expansion after an error, which pushed the error itself out of a plain tail."""
    if len(text) <= limit:
        return text
    errors = [line for line in text.splitlines() if "error" in line.lower()][:20]
    head = "\n".join(errors)[: limit // 3]
    return f"{head}\n[...]\n{text[-(limit - len(head) - 7):]}" if head else text[-limit:]
