import importlib.util
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch

from kernelevo.candidate import BACKENDS
from kernelevo.errors import ConfigError
from kernelevo.evaluate.static.checks import (
    PERMISSIVE_REASONS, POLICIES, STATIC_REASONS, Finding, check_source,
)
from kernelevo.evaluate.static.cuda_source import SOURCE_RULES
from kernelevo.evaluate.static.rules import ATTRIBUTE_RULES, NAME_RULES
from kernelevo.evaluate.verdict import REASONS

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]
BY_FILE = {entry["file"]: entry for entry in MANIFEST}
HONEST = [e for e in MANIFEST if e["expect_status"] == "ok"]
EXAMPLES = sorted(ROOT.glob("examples/*/*_candidate.py"))

HEADER = "import torch\nimport torch.nn as nn\n"
MODELNEW = "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


def fixture_source(entry: dict) -> str:
    return (FIXTURES / "candidates" / entry["file"]).read_text()


def scan(body: str, backend: str = "pytorch", policy: str = "default") -> list[Finding]:
    """Findings for a snippet; imports and a ModelNew are added when it lacks them."""
    source = HEADER + textwrap.dedent(body)
    if "ModelNew" not in source:
        source += MODELNEW
    return check_source(source, backend, policy)


def reasons(body: str, backend: str = "pytorch", policy: str = "default") -> set[str]:
    return {finding.reason for finding in scan(body, backend, policy)}


# The manifest and the corpus agree

def test_manifest_lists_every_candidate_once():
    files = sorted(p.name for p in (FIXTURES / "candidates").glob("*.py"))
    assert sorted(BY_FILE) == files
    assert len(BY_FILE) == len(MANIFEST)


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_manifest_entry_is_consistent(entry):
    assert (FIXTURES / "tasks" / entry["task"]).is_file()
    assert entry["backend"] in BACKENDS
    assert isinstance(entry["needs_gpu"], bool) and entry["trick"]
    assert entry["expect_reasons"], "every fixture needs an expected verdict"
    for key in ("expect", "dynamic"):
        named = entry[f"{key}_reasons"]
        assert all(reason in REASONS for reason in named), named
        first_status = REASONS[named[0]][0] if named else "ok"
        assert entry[f"{key}_status"] == first_status


@pytest.mark.parametrize("task", sorted((FIXTURES / "tasks").glob("*.py")), ids=lambda p: p.name)
def test_fixture_task_runs_on_cpu(task):
    module = load_module(task, f"fixture_task_{task.stem}")
    sizes = [v for k, v in vars(module).items() if isinstance(v, int) and not k.startswith("_")]
    assert sizes, "tasks carry their sizes as module-level int constants"
    inputs = module.get_inputs()
    assert all(t.device.type == "cpu" for t in inputs)
    output = module.Model(*module.get_init_inputs())(*inputs)
    assert isinstance(output, torch.Tensor) and torch.isfinite(output).all()


TRITON_FIXTURES = [e for e in MANIFEST
                   if e["backend"] == "triton" and e["expect_reasons"] != ["syntax_error"]]


@pytest.mark.parametrize("entry", TRITON_FIXTURES, ids=lambda e: e["file"])
def test_triton_fixtures_follow_the_input_device(entry):
    source = fixture_source(entry)
    assert "import triton\n" in source and "import triton.language as tl\n" in source
    if not entry["needs_gpu"]:
        assert not any(mark in source for mark in ("'cuda'", '"cuda"', ".cuda()"))


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The Triton 3.6 interpreter converts 1-element arrays to int in a way numpy deprecates.
@pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")
@pytest.mark.parametrize("entry", [e for e in HONEST if not e["needs_gpu"]],
                         ids=lambda e: e["file"])
def test_accepted_fixtures_compute_the_task_on_cpu(entry):
    task = load_module(FIXTURES / "tasks" / entry["task"], "fixture_task")
    candidate = load_module(FIXTURES / "candidates" / entry["file"], "fixture_candidate")
    inputs, init = task.get_inputs(), task.get_init_inputs()
    torch.manual_seed(0)
    expected = task.Model(*init)(*inputs)
    torch.manual_seed(0)
    with torch.no_grad():
        output = candidate.ModelNew(*init)(*[t.clone() for t in inputs])
    assert type(output) is torch.Tensor and output.dtype == expected.dtype
    torch.testing.assert_close(output, expected.detach(), atol=1e-4, rtol=1e-4)


# Fixtures under the static checks

@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_fixture_static_findings_match_manifest(entry):
    found = {f.reason for f in check_source(fixture_source(entry), entry["backend"])}
    if entry["expect_reasons"][0] in STATIC_REASONS:
        assert found, f"static checks should catch {entry['file']}"
        assert found <= set(entry["expect_reasons"]), found
    else:
        assert found == set(), f"{entry['file']} is for the dynamic checks, static found {found}"


@pytest.mark.parametrize("entry", HONEST, ids=lambda e: e["file"])
def test_accepted_fixtures_have_no_default_finding(entry):
    assert check_source(fixture_source(entry), entry["backend"], "default") == []


@pytest.mark.parametrize("entry", [e for e in HONEST if e["file"].startswith("honest_")],
                         ids=lambda e: e["file"])
def test_honest_fixtures_pass_strict(entry):
    assert check_source(fixture_source(entry), entry["backend"], "strict") == []


def test_strict_rejects_library_gemm_and_pytorch_seed():
    gemm = check_source(fixture_source(BY_FILE["library_gemm_epilogue.py"]), "triton", "strict")
    assert [(f.reason, f.line) for f in gemm] == [("library_compute", 27)]
    assert "torch.mm" in gemm[0].detail
    seed = {f.reason for f in check_source(fixture_source(BY_FILE["pytorch_seed_softmax.py"]),
                                           "pytorch", "strict")}
    assert seed == {"no_custom_kernel", "library_compute"}


@pytest.mark.parametrize("name", ["ghost_kernel.py", "ghost_copy_kernel.py"])
def test_strict_sees_the_reference_op_of_a_ghost_kernel(name):
    found = check_source(fixture_source(BY_FILE[name]), "triton", "strict")
    assert [f.reason for f in found] == ["library_compute"]
    assert "torch.softmax" in found[0].detail


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_examples_have_no_finding(path):
    backend = "cuda" if path.name.startswith("cuda") else "triton"
    assert check_source(path.read_text(), backend, "default") == []


# Findings themselves

def test_findings_name_line_and_construct_sorted_by_line():
    found = scan("""
        import gc

        def forward(x):
            return gc.get_objects()
    """)
    assert [(f.reason, f.line) for f in found] == [("harness_introspection", 4),
                                                  ("harness_introspection", 7)]
    assert "import gc" in found[0].detail and "gc.get_objects" in found[1].detail
    assert all(f.status == "rejected" for f in found)


def test_one_finding_per_reason_and_line():
    found = scan("import torch.cuda as c; c.synchronize = None; c.graph = None")
    assert [(f.reason, f.line) for f in found] == [("harness_tampered", 3)]


def test_every_rule_reason_is_a_static_reason():
    table = ({r for _, r in NAME_RULES} | set(ATTRIBUTE_RULES.values())
             | {r for _, r in SOURCE_RULES})
    assert table <= STATIC_REASONS <= set(REASONS)
    assert PERMISSIVE_REASONS <= STATIC_REASONS
    assert {REASONS[r][0] for r in STATIC_REASONS} == {"rejected", "compile_error"}


@pytest.mark.parametrize("backend, policy", [("metal", "default"), ("triton", "lenient")])
def test_unknown_backend_or_policy_is_a_config_error(backend, policy):
    with pytest.raises(ConfigError, match="use one of"):
        check_source(MODELNEW, backend, policy)


def test_syntax_error_names_its_line():
    found = check_source("import torch\n\ndef forward(x:\n    return x\n", "triton")
    assert [(f.reason, f.line, f.status) for f in found] == [("syntax_error", 3, "compile_error")]


def test_missing_modelnew_is_reported():
    found = check_source(HEADER + "class Model(nn.Module):\n    pass\n", "pytorch")
    assert [(f.reason, f.status) for f in found] == [("no_modelnew", "compile_error")]
    assert check_source(HEADER + "class Impl(nn.Module):\n    pass\nModelNew = Impl\n",
                        "pytorch") == []


# One rule at a time: each snippet must give exactly the named reason

FLAGGED = {
    "inherits_reference": [
        "class ModelNew(Model):\n    pass",
        "import task\nclass ModelNew(task.Model):\n    pass",
        "from task import Model",
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return Model()(x)",
    ],
    "try_fallback": [
        "def forward(x):\n    try:\n        return launch(x)\n    except Exception:\n"
        "        return x * 2",
        "def forward(x):\n    try:\n        return launch(x)\n    finally:\n        return x * 2",
        "def forward(x):\n    try:\n        return launch(x)\n    except RuntimeError:\n"
        "        print('kernel failed')\n        return x * 2",
        "import contextlib\ndef forward(x):\n    with contextlib.suppress(Exception):\n"
        "        return launch(x)",
        "def forward(xs):\n    for x in xs:\n        try:\n            launch(x)\n"
        "        except RuntimeError:\n            if x.is_cuda:\n                continue\n"
        "            raise",
    ],
    "dynamic_code": [
        "exec('x = 1')",
        "value = eval('1 + 1')",
        "code = compile('1', 'f', 'eval')",
        "mod = __import__('os')",
        "import importlib\nmod = importlib.import_module('os')",
        "def forward(x, name):\n    return getattr(torch, name)(x)",
    ],
    "harness_introspection": [
        "import gc", "import inspect", "import traceback", "import ctypes", "import builtins",
        "import sys\nframe = sys._getframe(1)",
        "import sys\nmods = sys.modules",
        "from sys import settrace\nsettrace(None)",
        "import sys\nsys.setprofile(None)",
        "real = __builtins__",
        "def f(frame):\n    return frame.f_back",
        "def f(frame):\n    return frame.f_locals['expected']",
        "def f(frame):\n    return frame.f_globals",
        "def f(fn):\n    return fn.__globals__",
        "def f(fn):\n    return fn.__code__",
        "names = globals()",
        "def f():\n    return locals()",
        "table = torch.__dict__",
    ],
    "harness_tampered": [
        "torch.cuda.synchronize = lambda: None",
        "import time\ntime.perf_counter = lambda: 0.0",
        "torch.Tensor.__eq__ = lambda a, b: True",
        "setattr(torch, 'allclose', lambda *a: True)",
        "import torch.nn.functional as F\nF.softmax = lambda *a, **k: None",
        "import triton\ntriton.testing.do_bench = lambda *a, **k: 0.001",
        "import torch as T\nT.allclose = None",
        "from torch import cuda\ncuda.synchronize = None",
        "sync_owner = torch.cuda\nsync_owner.synchronize = None",
        "del torch.allclose",
        "torch.testing.assert_close = None",
        "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'",
        "import os\nos.environ.update({'TRITON_INTERPRET': '0'})",
        "import os\ndel os.environ['PATH']",
        "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)",
        "import os\nos.setsid()",
        "import os\nos.kill(os.getppid(), 9)",
        "def forward(x):\n    torch.cuda.synchronize = None\n    return x",
    ],
    "identity_caching": [
        "def f(x, cache):\n    return cache.get(id(x))",
        "def f(x, cache):\n    return cache[x.data_ptr()]",
        "def f(x, seen):\n    return x._cdata in seen",
        "class K:\n    def f(self, x):\n        self.version = x._version",
        "def f(x, y):\n    return {x.untyped_storage().data_ptr(): y}",
        "def f(x):\n    key = str(x.data_ptr())\n    return {key}",
        "def g(id=None):\n    return id\ndef f(x, cache):\n    return cache.get(id(x))",
        "LAST = [0]\ndef f(x):\n    return x.data_ptr() == LAST[0]",
        "LAST = []\ndef f(x):\n    LAST.append(id(x))",
        "def f(xs):\n    return tuple(map(id, xs))",
        # a modulus too large for alignment keeps addresses apart
        "def f(x, cache):\n    return cache[x.data_ptr() % (1 << 62)]",
        "def f(x, cache):\n    return cache[getattr(x, 'data_ptr')()]",
        "class K:\n    def f(self, x):\n        return x.data_ptr() in (self.a, self.b)",
        "import functools\n@functools.lru_cache(maxsize=None)\ndef f(n):\n    return n",
        "from functools import cache\n@cache\ndef f(n):\n    return n",
        "import functools\nclass K:\n    @functools.cached_property\n    def v(self):\n"
        "        return 1",
        "import weakref",
    ],
    "stateful_forward": [
        "COUNT = 0\ndef forward(x):\n    global COUNT\n    COUNT = COUNT + 1\n    return x",
        "def outer():\n    n = 0\n    def inner():\n        nonlocal n\n        n = 1\n"
        "    return inner",
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        self.calls += 1\n"
        "        return x",
        "class ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        self.calls = self.calls + 1\n        return x",
        "CACHE = {}\ndef forward(x):\n    CACHE[x.shape] = x\n    return x",
        "RESULTS = []\ndef forward(x):\n    RESULTS.append(x)\n    return x",
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.cache = {}\n    def forward(self, x):\n        self.cache[1] = x\n"
        "        return x",
        "class ModelNew(nn.Module):\n    memo = dict()\n    def forward(self, x):\n"
        "        self.memo.setdefault(1, x)\n        return x",
        "def forward(x, _seen={}):\n    _seen.setdefault(1, x)\n    return x",
    ],
    "cuda_graph": [
        "g = torch.cuda.CUDAGraph()",
        "def f(g):\n    with torch.cuda.graph(g):\n        pass",
        "fn = torch.cuda.make_graphed_callables(None, ())",
        "pool = torch.cuda.graph_pool_handle()",
        "def f(g):\n    g.replay()",
        "fast = torch.compile(lambda x: x, mode='reduce-overhead')",
        "SRC = '''\nvoid run() {\n    cudaGraphLaunch(exec, 0);\n}\n'''",
    ],
    "side_stream": [
        "s = torch.cuda.Stream()",
        "def f(s):\n    with torch.cuda.stream(s):\n        pass",
        "s = torch.cuda.ExternalStream(0)",
        "torch.cuda.set_stream(None)",
        "SRC = '''\nvoid run() {\n    cudaStream_t s;\n    cudaStreamCreate(&s);\n}\n'''",
        "SRC = 'cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);'",
    ],
    "background_thread": [
        "import threading", "import _thread", "import concurrent.futures",
        "from concurrent.futures import ThreadPoolExecutor", "import asyncio",
        "import multiprocessing", "import torch.multiprocessing as mp",
        "SRC = '#include <thread>\\nvoid run() { std::thread t(work); t.detach(); }'",
        "SRC = 'void run() { pthread_create(&t, 0, work, 0); }'",
        "SRC = 'void run() { auto f = std::async(work); }'",
    ],
    "spawned_process": [
        "import subprocess", "import pty",
        "import os\nos.system('ls')", "import os\npipe = os.popen('ls')",
        "import os\npid = os.fork()", "import os\nos.execv('/bin/sh', ['sh'])",
        "import os\nos.spawnl(os.P_NOWAIT, '/bin/sh')",
        "import os\ngetattr(os, 'system')('ls')",
        "from os import posix_spawn",
        "SRC = 'void run() { system(\"ls\"); }'",
        "SRC = 'void run() { FILE* p = popen(\"ls\", \"r\"); }'",
        "SRC = 'void run() { if (fork() == 0) {} }'",
    ],
    "file_io": [
        "def f():\n    return open('/tmp/x', 'w')",
        "from pathlib import Path\nPath('/tmp/x').write_text('1')",
        "from pathlib import Path\ndata = Path('/tmp/x').read_bytes()",
        "import os\nos.remove('/tmp/x')", "import os\nos.makedirs('/tmp/d')",
        "import shutil\nshutil.copy('a', 'b')", "import tempfile\nd = tempfile.mkdtemp()",
        "import pickle\npickle.dump(1, None)", "torch.save({}, 'x.pt')", "w = torch.load('x.pt')",
        "import numpy as np\nnp.save('x.npy', None)", "import numpy as np\na = np.load('x.npy')",
        "import socket",
        "SRC = 'void run() { FILE* f = fopen(\"x\", \"w\"); }'",
        "SRC = '#include <fstream>\\nvoid run() { std::ofstream out(\"x\"); }'",
        "SRC = 'void run() { std::ifstream in(\"x\"); }'",
    ],
    "lazy_output": [
        "class Lazy(torch.Tensor):\n    pass",
        "from torch import Tensor\nclass Lazy(Tensor):\n    pass",
        "class Lazy:\n    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        return None",
        "class Lazy:\n    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
        "        return None",
        "def f(x):\n    return torch.Tensor._make_subclass(object, x)",
        "handle = torch._C._get_tracing_state",
        "class Deferred:\n    def __eq__(self, other):\n        return True",
        "from torch.utils._python_dispatch import TorchDispatchMode",
    ],
}


@pytest.mark.parametrize("reason, body",
                         [(reason, body) for reason, bodies in FLAGGED.items() for body in bodies],
                         ids=lambda v: v if v in REASONS else "")
def test_rule_flags(reason, body):
    assert reasons(body) == {reason}


PASSES = [
    # module-level try around an import is how optional dependencies load
    "try:\n    import numpy\nexcept ImportError:\n    numpy = None",
    "import re\npattern = re.compile('a+')",
    "fast = torch.compile(lambda x: x)",
    "def f(id):\n    return id + 1",
    "def open_tile(x):\n    return x",
    "import os\nos.environ['MAX_JOBS'] = '8'",
    "import os\nos.environ.setdefault('TORCH_CUDA_ARCH_LIST', '9.0')",
    "import os\njobs = os.environ.get('MAX_JOBS', '4')",
    "import os\npath = os.path.join('a', 'b')",
    "from pathlib import Path\nhere = Path(__file__).parent",
    "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.calls = 0\n        self.calls += 1\n        self.cache = {}\n"
    "    def forward(self, x):\n        out = torch.empty_like(x)\n        out[0] = x[0]\n"
    "        self.buffer = out\n        return out",
    "def forward(x):\n    acc = 0\n    for row in x:\n        acc += row\n    return acc",
    "def stream_of(x):\n    return torch.cuda.current_stream()",
    "SRC = '''\n#include <ATen/cuda/CUDAContext.h>\n__global__ void k(float* y) {}\n"
    "void run() {\n    auto s = at::cuda::getCurrentCUDAStream();\n"
    "    // no cudaStreamCreate, no std::thread, no fopen here: comments are not code\n}\n'''",
    "SRC = 'int ecosystem(int a); void filesystem_ok(); int forked;'",
    "def f():\n    '''Mentions cudaGraphLaunch(); and std::thread; in prose.'''\n    return 1",
    "_ext = None\ndef build():\n    global _ext\n"
    "    from torch.utils.cpp_extension import load_inline\n"
    "    _ext = load_inline(name='k', cpp_sources='', functions=['f'])\n    return _ext",
    "def shape_of(x):\n    return x.view(-1).size(0), x.stride(0), x.numel(), x.dim()",
    # identities handed on, not kept: a helper that returns one is no cache by itself
    "def f(x):\n    return id(x)",
    "def f(x):\n    return x.data_ptr(), x._version, x.untyped_storage().nbytes()",
    "def forward(x, sizes=[1, 2]):\n    return x",
    "def forward(x):\n    try:\n        return launch(x)\n    finally:\n        pass",
]


@pytest.mark.parametrize("body", PASSES)
def test_honest_construct_passes_every_policy(body):
    assert scan(body, "pytorch", "default") == []
    assert scan(body, "pytorch", "permissive") == []
    # strict only asks for a kernel, which these snippets do not have
    assert reasons(body, "pytorch", "strict") == {"no_custom_kernel"}


TRITON_KERNEL = """
import triton
import triton.language as tl

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    total = x.sum(axis=0) + tl.sum(x, axis=0)
    tl.store(out_ptr + offsets, tl.exp(x) * total, mask=mask)
"""
TRITON_MODEL = TRITON_KERNEL + """
class ModelNew(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.norm = nn.LayerNorm(n_out)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        x = x.contiguous().view(x.size(0), -1)
        out = torch.empty_like(x)
        n = x.numel()
        weight = self.linear.weight.to(x.device)
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out.reshape(x.shape)
"""


@pytest.mark.parametrize("policy", POLICIES)
def test_honest_triton_model_passes(policy):
    assert scan(TRITON_MODEL, "triton", policy) == []


@pytest.mark.parametrize("call", [
    "torch.matmul(x, x)", "torch.softmax(x, dim=-1)", "x.sum(dim=1)", "x.mean()", "x @ x",
    "torch.nn.functional.relu(x)", "self.linear(x)", "x.exp_()", "torch.ops.aten.mm(x, x)",
])
def test_strict_flags_library_compute_outside_kernels(call):
    body = TRITON_MODEL.replace("return out.reshape(x.shape)", f"return {call}")
    assert reasons(body, "triton", "strict") == {"library_compute"}
    assert reasons(body, "triton", "default") == set()


def test_strict_allows_compute_in_init():
    body = TRITON_MODEL.replace("nn.init.zeros_(self.linear.bias)",
                                "self.scale = torch.exp(torch.ones(1)).sum()")
    assert reasons(body, "triton", "strict") == set()


@pytest.mark.parametrize("body", [
    "def forward(x):\n    return x",
    TRITON_KERNEL,  # defined but never launched
    "import triton\n@triton.autotune(configs=[], key=[])\ndef k(x):\n    pass\n"
    "def forward(x):\n    k[(1,)](x)",
    # an attribute of the same name is not the module-level kernel
    "import triton\n@triton.jit\ndef view(x):\n    pass\n"
    "def forward(x):\n    return x.view(-1)",
])
def test_triton_backend_needs_a_launched_jit_kernel(body):
    assert reasons(body, "triton") == {"no_custom_kernel"}


def test_triton_jit_imported_by_name_and_autotuned_counts():
    body = ("import triton\nfrom triton import jit\n"
            "@triton.autotune(configs=[], key=['n'])\n@jit\ndef k(x, n):\n    pass\n"
            "def forward(x):\n    k[(1,)](x, 1)\n    return x")
    assert reasons(body, "triton", "strict") == set()


LOAD_INLINE = ("from torch.utils.cpp_extension import load_inline\n"
               "ext = load_inline(name='k', cpp_sources=CPP, cuda_sources=CUDA,\n"
               "                  functions=['f'])\n")


@pytest.mark.parametrize("cuda_source, found", [
    ("'__global__ void k(float* y) { y[0] = 1.0f; }'", set()),
    ("'// __global__ void k(float* y) {}\\nvoid f() {}'", {"no_custom_kernel"}),
    ("'void f() { return; }'", {"no_custom_kernel"}),
])
def test_cuda_backend_needs_a_global_function(cuda_source, found):
    body = f"CPP = 'void f();'\nCUDA = {cuda_source}\n" + LOAD_INLINE
    assert reasons(body, "cuda") == found


def test_cuda_backend_needs_load_inline():
    assert reasons("CUDA = '__global__ void k() {}'", "cuda") == {"no_custom_kernel"}


def test_cuda_source_finding_names_the_line_inside_the_string():
    found = scan("SRC = '''\n#include <thread>\n\nvoid f() {\n    std::thread t(g);\n}\n'''\n")
    assert [(f.reason, f.line) for f in found] == [("background_thread", 7)]
    assert "std::thread" in found[0].detail


def test_pytorch_backend_needs_no_kernel_except_under_strict():
    assert reasons("def forward(x):\n    return x", "pytorch", "default") == set()
    assert reasons("def forward(x):\n    return x", "pytorch", "strict") == {"no_custom_kernel"}


def test_permissive_keeps_only_attacks_on_the_judge():
    body = ("import threading\nimport weakref\nCACHE = {}\n"
            "class ModelNew(Model):\n    def forward(self, x):\n        try:\n"
            "            CACHE[1] = x\n        except Exception:\n            pass\n"
            "        torch.allclose = None\n        return x")
    assert reasons(body, "triton", "default") == {
        "background_thread", "identity_caching", "stateful_forward", "inherits_reference",
        "try_fallback", "harness_tampered", "no_custom_kernel"}
    assert reasons(body, "triton", "permissive") == {"background_thread", "harness_tampered"}


def test_safe_member_does_not_hide_code_in_its_chain():
    assert reasons("import gc\ngc.collect()") == set()
    assert reasons("import gc\nn = gc[exec('x = 1')].collect()") == {
        "harness_introspection", "dynamic_code"}
