"""Every static rule next to the honest code that looks most like what it catches.

Each rule gets honest near-misses an LLM plausibly writes (they must give no
finding) and the cheats it exists for (they must give exactly the named
reason). Snippets become whole candidates: a Triton kernel and a ModelNew
launching it are added when the snippet has none, so a finding can only come
from the snippet itself.
"""

import textwrap

import pytest

from kernelevo.evaluate.static.checks import STATIC_REASONS, check_source

PRELUDE = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
KERNEL = """
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)
"""
MODEL = """
class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
"""
CUDA_MODEL = '''
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor scale(torch::Tensor x);"
CUDA = r"""
{source}
__global__ void scale_kernel(const float* x, float* y, int64_t n) {{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}}
"""
_ext = load_inline(name="scale", cpp_sources=CPP, cuda_sources=CUDA, functions=["scale"])


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.scale(x)
'''


def case(rule: str, name: str, body: str, backend: str = "triton", also: tuple[str, ...] = ()):
    """One table row: the rule, a snippet, its backend and any other reason it must give."""
    return pytest.param(rule, body, backend, {rule, *also}, id=f"{rule}: {name}")


def candidate(body: str, backend: str) -> str:
    """A whole candidate around a snippet (for cuda: a snippet of the CUDA source)."""
    body = textwrap.dedent(body)
    if backend == "cuda":
        return PRELUDE + CUDA_MODEL.format(source=body)
    source = PRELUDE + ("" if "@triton.jit" in body else KERNEL) + body
    defines_module = "ModelNew" in body or "(nn.Module)" in body
    return source if defines_module else source + MODEL


def found(body: str, backend: str = "triton", policy: str = "default") -> set[str]:
    return {f.reason for f in check_source(candidate(body, backend), backend, policy)}


# Honest near-misses: must give no finding.
NEAR_MISSES = [
    # no_custom_kernel: a kernel counts as launched however it is reached
    case("no_custom_kernel", "staticmethod kernel on self", """
        class ModelNew(nn.Module):
            @staticmethod
            @triton.jit
            def _kernel(x_ptr, n, BLOCK: tl.constexpr):
                tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

            def forward(self, x):
                self._kernel[(1,)](x, x.numel(), BLOCK=128)
                return x
    """),
    case("no_custom_kernel", "class attribute kernel via the class", """
        @triton.jit
        def _impl(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

        class ModelNew(nn.Module):
            kernel = _impl

            def forward(self, x):
                ModelNew.kernel[(1,)](x, BLOCK=128)
                return x
    """),
    case("no_custom_kernel", "kernel in the class body, aliased before launch", """
        class ModelNew(nn.Module):
            @triton.jit
            def _kernel(x_ptr, BLOCK: tl.constexpr):
                tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

            def forward(self, x):
                kernel = self._kernel
                kernel[(1,)](x, BLOCK=128)
                return x
    """),
    case("no_custom_kernel", "kernel handed to a launch helper", """
        @triton.jit
        def zero_kernel(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

        def launch(kernel, x):
            kernel[(1,)](x, BLOCK=128)
            return x

        class ModelNew(nn.Module):
            def forward(self, x):
                return launch(zero_kernel, x)
    """),
    case("no_custom_kernel", "kernel launched through functools.partial", """
        import functools

        @triton.jit
        def zero_kernel(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

        class ModelNew(nn.Module):
            def forward(self, x):
                run = functools.partial(zero_kernel[(1,)], BLOCK=128)
                run(x)
                return x
    """),
    case("no_custom_kernel", "kernel made by a factory, defined conditionally", """
        def make_kernel(fused):
            if fused:
                @triton.jit
                def kernel(x_ptr, BLOCK: tl.constexpr):
                    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
            else:
                @triton.jit
                def kernel(x_ptr, BLOCK: tl.constexpr):
                    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)
            return kernel

        KERNELS = {flag: make_kernel(flag) for flag in (True, False)}

        class ModelNew(nn.Module):
            def forward(self, x):
                KERNELS[True][(1,)](x, BLOCK=128)
                return x
    """),
    case("no_custom_kernel", "kernels defined in a loop", """
        KERNELS = {}
        for fill in (0.0, 1.0):
            @triton.jit
            def fill_kernel(x_ptr, BLOCK: tl.constexpr):
                tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
            KERNELS[fill] = fill_kernel

        class ModelNew(nn.Module):
            def forward(self, x):
                KERNELS[1.0][(1,)](x, BLOCK=128)
                return x
    """),
    case("no_custom_kernel", "autotuned kernel with triton.Config", """
        @triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4),
                                  triton.Config({"BLOCK": 256}, num_warps=8)], key=["n"])
        @triton.jit
        def tuned_kernel(x_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offsets, 0.0, mask=offsets < n)

        class ModelNew(nn.Module):
            def forward(self, x):
                n = x.numel()
                tuned_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
                return x
    """),
    case("no_custom_kernel", "kernel looked up with getattr", """
        class ModelNew(nn.Module):
            @staticmethod
            @triton.jit
            def _kernel(x_ptr, BLOCK: tl.constexpr):
                tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

            def forward(self, x):
                getattr(self, "_kernel")[(1,)](x, BLOCK=128)
                return x
    """),
    # identity_caching: a pointer handed on, or checked for alignment, is no cache
    case("identity_caching", "data_ptr as a kernel argument", """
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                n = x.numel()
                scale_kernel[(triton.cdiv(n, 1024),)](x.data_ptr(), out.data_ptr(), n, BLOCK=1024)
                return out
    """),
    case("identity_caching", "data_ptr alignment check", """
        class ModelNew(nn.Module):
            def forward(self, x):
                if x.data_ptr() % 16 != 0:
                    x = x.clone()
                aligned = (x.data_ptr() & 15) == 0
                assert aligned and x.untyped_storage().data_ptr() % 16 == 0
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("identity_caching", "aliasing checks between fresh tensors", """
        class ModelNew(nn.Module):
            def forward(self, x, out=None):
                out = torch.empty_like(x) if out is None else out
                if out.data_ptr() == x.data_ptr() or id(out) == id(x):
                    out = torch.empty_like(x)
                x_ptr = x.data_ptr()
                assert x_ptr not in (out.data_ptr(),) and len({x_ptr, out.data_ptr()}) == 2
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("identity_caching", "pointer table for a grouped kernel", """
        def pointer_table(tensors):
            ptrs = [t.data_ptr() for t in tensors]
            ptrs.append(tensors[0].data_ptr())
            return torch.tensor(ptrs, dtype=torch.int64, device=tensors[0].device)

        class ModelNew(nn.Module):
            def forward(self, x):
                table = pointer_table([x, x])
                print(f"table at {table.data_ptr():#x}")
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("identity_caching", "id and pid as names", """
        @triton.jit
        def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            offsets = pid * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)

        class ModelNew(nn.Module):
            def forward(self, x, id=None):
                out = torch.empty_like(x)
                copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out if id is None else out[id]
    """),
    case("identity_caching", "lru_cache on keyless and scalar helpers", """
        import functools
        from functools import lru_cache

        @functools.lru_cache(maxsize=None)
        def sm_count():
            return torch.cuda.get_device_properties(0).multi_processor_count

        @lru_cache
        def block_for(n: int, dtype: torch.dtype) -> int:
            return min(triton.next_power_of_2(n), 4096)
    """),
    case("identity_caching", "cache_key attribute holding shapes", """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.cache_key = None
                self.block = 128

            def forward(self, x):
                self.cache_key = (tuple(x.shape), x.dtype)
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    # stateful_forward: state that never hands an output back
    case("stateful_forward", "launch configs memoised per shape", """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self._configs = {}

            def forward(self, x):
                config = self._configs.get(x.shape)
                if config is None:
                    config = self._configs[x.shape] = (1024, 4)
                out = torch.empty_like(x)
                block, warps = config
                scale_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block,
                                                                 num_warps=warps)
                return out
    """),
    case("stateful_forward", "extension built lazily through a helper", """
        from torch.utils.cpp_extension import load_inline

        _EXT = None

        def _compile():
            return load_inline(name="k", cpp_sources="", functions=["f"])

        def get_ext():
            global _EXT
            if _EXT is None:
                _EXT = _compile()
            return _EXT
    """),
    case("stateful_forward", "a list default that is only read", """
        class ModelNew(nn.Module):
            def forward(self, x, dims=[0]):
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out.flip(dims)
    """),
    case("stateful_forward", "settings in __init__, dataclass config", """
        from dataclasses import dataclass, field

        @dataclass(frozen=True)
        class LaunchConfig:
            block: int = 1024
            warps: list = field(default_factory=list)

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = 128
                self.config = LaunchConfig()
                self.launches = 0
                self.launches += 1

            def forward(self, x):
                out = torch.empty_like(x)
                total = 0
                for size in x.shape:
                    total += size
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    # try_fallback: a try that cannot put another answer in the kernel's place
    case("try_fallback", "try/finally and an except that re-raises", """
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                try:
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                except RuntimeError as error:
                    raise RuntimeError(f"scale_kernel failed for {tuple(x.shape)}") from error
                finally:
                    torch.cuda.synchronize()
                return out
    """),
    case("try_fallback", "module-level optional import", """
        try:
            import numpy as np
        except ImportError:
            np = None
    """),
    # dynamic_code
    case("dynamic_code", "compile, eval, code as names and methods", """
        import re

        PATTERN = re.compile(r"\\d+")

        class ModelNew(nn.Module):
            def compile(self):
                return self

            def forward(self, x):
                self.eval()
                code = "mode=fast"
                note = "no exec(); torch.compile(mode='reduce-overhead') was slower"
                dtype = getattr(tl, "float16")
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out

        fast = torch.compile(lambda x: x, mode="max-autotune-no-cudagraphs")
    """),
    # harness_introspection
    case("harness_introspection", "vars as a local, gc.collect, names of things", """
        import gc
        import sys

        def describe(fn, x):
            vars = (fn.__name__, type(x).__name__, sys.version_info >= (3, 10))
            return vars

        gc.collect()
    """),
    # harness_tampered: reading the harness's functions, setting allowed knobs
    case("harness_tampered", "synchronize read, allowed settings and env reads", """
        import os

        os.environ["MAX_JOBS"] = str(os.cpu_count() or 4)
        BLOCK: tl.constexpr = 1024
        WARPS = tl.constexpr(4)
        DEBUG = os.environ.get("KERNEL_DEBUG", "0") == "1"
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.sync = torch.cuda.synchronize
                setattr(self, "block", 128)

            def forward(self, x):
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                if DEBUG:
                    torch.cuda.synchronize()
                return out
    """),
    # cuda_graph
    case("cuda_graph", "compile without graphs, events, capture checks", """
        fast = torch.compile(lambda x: x * 2, mode="max-autotune-no-cudagraphs",
                             options={"triton.cudagraphs": False})

        class ModelNew(nn.Module):
            def forward(self, x):
                assert not torch.cuda.is_current_stream_capturing()
                start = torch.cuda.Event(enable_timing=True)
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("cuda_graph", "a comment on what the CUDA code avoids", """
        // no cudaGraphLaunch here: the harness times with graphs when asked
        void run_scale(const float* x, float* y, int64_t n) {}
    """, backend="cuda"),
    # side_stream: the current stream, however it is spelled
    case("side_stream", "current stream passed on, entered, annotated", """
        from typing import Optional

        class ModelNew(nn.Module):
            def forward(self, x, stream: Optional[torch.cuda.Stream] = None):
                assert stream is None or isinstance(stream, torch.cuda.Stream)
                current = torch.cuda.current_stream()
                out = torch.empty_like(x)
                with torch.cuda.stream(current):
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                with torch.cuda.stream(torch.cuda.current_stream(x.device)):
                    raw = torch._C._cuda_getCurrentRawStream(x.device.index)
                with torch.cuda.device(x.device):
                    handle = torch.cuda.current_stream().cuda_stream
                    launch_on(out, handle)
                return out
    """),
    case("side_stream", "current stream inside the CUDA source", """
        #include <ATen/cuda/CUDAContext.h>
        void launch(const float* x, float* y, int64_t n) {
            cudaStream_t stream = at::cuda::getCurrentCUDAStream();
            cudaStreamSynchronize(stream);
        }
    """, backend="cuda"),
    # background_thread
    case("background_thread", "a lock around a lazy build, cpu_count", """
        import multiprocessing
        import os
        import threading

        _BUILD_LOCK = threading.Lock()
        os.environ["MAX_JOBS"] = str(multiprocessing.cpu_count())
    """),
    case("background_thread", "std::thread names that start nothing", """
        #include <thread>
        int workers() { return (int)std::thread::hardware_concurrency(); }
    """, backend="cuda"),
    # spawned_process
    case("spawned_process", "process facts and look-alike names", """
        import os
        import platform

        PID = os.getpid()
        SYSTEM = platform.system()
        CORES = os.cpu_count()
    """),
    case("spawned_process", "look-alike C identifiers", """
        int subsystem(int a) { return a; }
        void fork_join_reduce(float* y) { y[0] = (float)subsystem(1); }
    """, backend="cuda"),
    # file_io: `open` as a name, key or method; paths without I/O
    case("file_io", "open as a key, attribute, method and parameter", """
        import os
        import tempfile
        from pathlib import Path

        MODES = {"open": 1, "closed": 0}
        BUILD_DIR = os.path.join(tempfile.gettempdir(), "kernels")
        HERE = Path(__file__).parent
        EXISTS = os.path.exists(BUILD_DIR)

        class Gate:
            def __init__(self):
                self.open = True

            def open_gate(self, open=True):
                self.open = open
                return self.open
    """),
    case("file_io", "an unused include of fstream", """
        #include <fstream>
        void noop() {}
    """, backend="cuda"),
    # lazy_output
    case("lazy_output", "tensor types named, not subclassed", """
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class Shape:
            rows: int
            cols: int

        class ModelNew(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                assert isinstance(x, torch.Tensor) and Shape(1, 2) == Shape(1, 2)
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    # inherits_reference
    case("inherits_reference", "the reference named in prose and names", """
        class ModelNew(nn.Module):
            \"\"\"Model's softmax, fused into one kernel.\"\"\"

            def __init__(self):
                super(ModelNew, self).__init__()
                self.model_dim = 64

            def forward(self, x):
                model = self
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    # no_modelnew
    case("no_modelnew", "ModelNew bound to another class", """
        class FusedScale(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out

        ModelNew = FusedScale
    """),
    # syntax_error
    case("syntax_error", "newer syntax", """
        def pick(shape):
            match shape:
                case (rows, cols) if (n := rows * cols) > 0:
                    return f"{n=}"
                case _:
                    return None
    """),
]

# Near-misses of the strict policy's library_compute: must pass strict too.
STRICT_NEAR_MISSES = [
    case("library_compute", "launch arithmetic and device queries", """
        import math

        class ModelNew(nn.Module):
            @torch.no_grad()
            def forward(self, x):
                props = torch.cuda.get_device_properties(x.device)
                n = x.numel()
                block = min(triton.next_power_of_2(n), 1024)
                grid = (min(triton.cdiv(n, block), props.multi_processor_count * 4),)
                scale = 1.0 / math.sqrt(x.shape[-1])
                out = torch.empty_like(x).view(-1)
                scale_kernel[grid](x.contiguous().view(-1), out, n, BLOCK=block)
                return out.view(x.shape), x.stride(0), max(n, 1) * scale
    """),
]

# Cheats: must give exactly the named reason (and those in `also`).
CHEATS = [
    case("no_custom_kernel", "kernel defined, forward in PyTorch", """
        class ModelNew(nn.Module):
            @staticmethod
            @triton.jit
            def _kernel(x_ptr, BLOCK: tl.constexpr):
                tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

            def forward(self, x):
                return x * 2.0
    """),
    case("identity_caching", "results keyed on data_ptr", also=("stateful_forward",), body="""
        _RESULTS = {}

        class ModelNew(nn.Module):
            def forward(self, x):
                key = (x.data_ptr(), tuple(x.shape))
                if key not in _RESULTS:
                    out = torch.empty_like(x)
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                    _RESULTS[key] = out.sum()
                return x * _RESULTS[key]
    """),
    case("identity_caching", "pointer compared with the last call's", """
        class ModelNew(nn.Module):
            def forward(self, x):
                if x.data_ptr() == self._last_ptr:
                    return self._last_out
                self._last_ptr = x.data_ptr()
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("identity_caching", "id() as a .get key", """
        class ModelNew(nn.Module):
            def forward(self, x):
                hit = self.seen.get(id(x))
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out if hit is None else hit
    """),
    case("identity_caching", "identity kept through a helper and an f-string", """
        SEEN = set()

        def fingerprint(t):
            return f"{t.data_ptr()}:{t.shape}"

        class ModelNew(nn.Module):
            def forward(self, x):
                SEEN.add(fingerprint(x))
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("identity_caching", "version counter kept on self", """
        class ModelNew(nn.Module):
            def forward(self, x):
                fresh = x._version != self.version
                self.version = x._version
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("identity_caching", "identities in a global list and set", """
        PTRS = []

        class ModelNew(nn.Module):
            def forward(self, x):
                PTRS.append(x.data_ptr())
                distinct = {t.data_ptr() for t in (x, x)}
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("identity_caching", "lru_cache over the tensor", """
        import functools

        @functools.lru_cache(maxsize=None)
        def cached_scale(x):
            out = torch.empty_like(x)
            scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
            return out

        class ModelNew(nn.Module):
            def forward(self, x):
                return cached_scale(x)
    """),
    case("stateful_forward", "output stored per shape and handed back", """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self._outputs = {}

            def forward(self, x):
                if x.shape not in self._outputs:
                    out = torch.empty_like(x)
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                    self._outputs[x.shape] = out
                return self._outputs[x.shape]
    """),
    case("stateful_forward", "a default dict written as a cache", """
        class ModelNew(nn.Module):
            def forward(self, x, _memo={}):
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                _memo[x.shape] = out
                return out
    """),
    case("stateful_forward", "a call counter", """
        class ModelNew(nn.Module):
            def forward(self, x):
                self.calls += 1
                out = torch.empty_like(x)
                if self.calls < 3:
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("try_fallback", "except falls back to PyTorch", """
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                try:
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                except Exception:
                    out = x * 2
                return out
    """),
    case("try_fallback", "finally swallows the failure", """
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                try:
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                finally:
                    return x * 2
    """),
    case("try_fallback", "a handler that re-raises only sometimes", """
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                try:
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                except RuntimeError:
                    if x.is_cuda:
                        raise
                    return x * 2
                return out
    """),
    case("dynamic_code", "builtin compile and exec", """
        SOURCE = "def forward(x):\\n    return x * 2\\n"
        exec(compile(SOURCE, "generated", "exec"))
    """),
    case("harness_introspection", "builtin vars and gc objects", """
        import gc

        def find_expected():
            return [vars(o) for o in gc.get_objects() if hasattr(o, "expected")]
    """),
    case("harness_tampered", "a setting that slows the baseline, a patched sync", """
        torch.backends.cudnn.enabled = False
        torch.cuda.synchronize = lambda device=None: None
    """),
    case("cuda_graph", "torch.compile capturing graphs through options", """
        fast = torch.compile(lambda x: x * 2, options={"triton.cudagraphs": True})
    """),
    case("side_stream", "a stream handed in from outside", """
        class ModelNew(nn.Module):
            def forward(self, x, stream=None):
                out = torch.empty_like(x)
                with torch.cuda.stream(stream):
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("side_stream", "a stream created for the kernel", """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.stream = torch.cuda.Stream()

            def forward(self, x):
                out = torch.empty_like(x)
                with torch.cuda.stream(self.stream):
                    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("background_thread", "threading imported for its lock and a thread", """
        import threading

        _LOCK = threading.Lock()
        WORKER = threading.Thread(target=print)
    """),
    case("background_thread", "a thread started in the CUDA source", """
        #include <thread>
        void run(const float* x) { std::thread worker([]{}); worker.detach(); }
    """, backend="cuda"),
    case("spawned_process", "a compiler run by hand", """
        import subprocess

        subprocess.run(["nvcc", "--version"], check=True)
    """),
    case("file_io", "builtin open next to a method named open", """
        class Gate:
            def open(self):
                return True

        def save(x):
            with open("/tmp/out.txt", "w") as handle:
                handle.write(str(x))
    """),
    case("file_io", "a temporary file for results", """
        import tempfile

        SCRATCH = tempfile.mkdtemp()
    """),
    case("lazy_output", "an object that answers comparisons", """
        class Deferred:
            def __eq__(self, other):
                return True
    """),
    case("inherits_reference", "a subclass of the reference", """
        from reference import Model

        class ModelNew(Model):
            def forward(self, x):
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return super().forward(out)
    """),
    case("no_modelnew", "the class under another name", """
        class Model_New(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return out
    """),
    case("syntax_error", "a missing parenthesis", """
        def forward(x:
            return x
    """),
]

STRICT_CHEATS = [
    case("library_compute", "the reference op next to a launch", """
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
                return torch.softmax(out, dim=-1)
    """),
]


@pytest.mark.parametrize("rule, body, backend, expected", NEAR_MISSES)
@pytest.mark.parametrize("policy", ["default", "permissive"])
def test_near_miss_passes(rule, body, backend, expected, policy):
    assert found(body, backend, policy) == set()


@pytest.mark.parametrize("rule, body, backend, expected", STRICT_NEAR_MISSES)
def test_strict_near_miss_passes(rule, body, backend, expected):
    assert found(body, backend, "strict") == set()


@pytest.mark.parametrize("rule, body, backend, expected", CHEATS)
def test_cheat_is_caught(rule, body, backend, expected):
    assert found(body, backend) == expected


@pytest.mark.parametrize("rule, body, backend, expected", STRICT_CHEATS)
def test_strict_cheat_is_caught(rule, body, backend, expected):
    assert found(body, backend, "strict") == expected
    assert found(body, backend, "default") == set()


def test_every_static_rule_has_a_near_miss_and_a_cheat():
    honest = {row.values[0] for row in NEAR_MISSES + STRICT_NEAR_MISSES}
    cheats = {row.values[0] for row in CHEATS + STRICT_CHEATS}
    assert honest == cheats == STATIC_REASONS
