"""Imported once by the forkserver, so that every child starts with it loaded.

Nothing here may initialise CUDA: a child forked from a process holding a
CUDA context cannot use the GPU. torch.compile's inductor takes about 2 s to
import and 0.5 s to hash torch's and Triton's sources for its cache keys
(measured on the GPU machine, bench/RESULTS.md "Cold eval"); every worker that
times the torch.compile baseline would otherwise pay that again.
"""

import os
import time

from kernelevo.cache_dir import keep_bytecode
from kernelevo.evaluate.sandbox import namespaces

namespaces.undumpable()  # out of a worker's reach, as the judge is

keep_bytecode()  # the judge's bytecode folder, written here too (cache_dir.py)

# Read when inductor's config is imported: one compile thread, no pool of
# compile processes (seconds to start, and they would look like spawned
# processes); is_available(), should an import ask, answered by NVML rather
# than by creating a context.
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401

try:
    import triton  # noqa: F401
    import triton.runtime.interpreter  # noqa: F401 - the knockout switch patches it (guards.py)
except ImportError:  # Triton is optional
    pass
try:  # imported by a kernel's first launch (its arguments' specialisation): 0.065 s on the H200
    import triton.experimental.gluon  # noqa: F401
except ImportError:  # an older Triton has none
    pass

# What a worker imports once its candidates come, before it loads the first
# (load_inline's hook, cuda_build.py): setuptools and torch's extension
# builder, otherwise on the candidate's path.
import torch.utils.cpp_extension  # noqa: E402,F401

# Only the timing phase compiles the baseline, and only on a GPU: a CPU-only
# build of torch (torch.version.cuda None) never needs inductor here. Asking
# the driver whether a GPU is present could initialise CUDA, so it is not asked.
if torch.version.cuda is not None:
    import torch._inductor.codecache
    import torch._inductor.compile_fx  # noqa: F401

    # Hashes of torch's and Triton's sources that key inductor's caches:
    # computed once here (0.5 s on the GPU machine) instead of in every
    # worker. Pure file hashing; each is cached once computed, with no thread
    # left behind.
    for _key in ("torch_key", "triton_key"):
        try:
            getattr(torch._inductor.codecache, _key)()
        except Exception:  # noqa: BLE001 - a missing or changed helper only costs time
            pass
    # Triton's own copy of its hash, which its compiler asks for at a kernel's
    # first launch in a process, cache hit or not. torch 2.11 has no
    # codecache.triton_key, so the loop above left it to the children: on the
    # H200 every worker's first Triton launch hashed libtriton.so again (0.39 s
    # of a re-check's 0.49 s first call; bench/first_call_profile.py).
    try:
        from triton.runtime.cache import triton_key as _triton_key
    except ImportError:  # an older Triton keeps it in its compiler
        try:
            from triton.compiler.compiler import triton_key as _triton_key
        except ImportError:
            _triton_key = None
    if _triton_key is not None:
        try:
            _triton_key()
        except Exception:  # noqa: BLE001 - a changed helper only costs time
            pass

    # What a worker's first torch.compile imported last time (preload_modules.py).
    import importlib

    from kernelevo.cache_dir import default_cache_dir
    from kernelevo.evaluate.shared import preload_modules

    for _name in preload_modules.read(default_cache_dir()):
        try:
            importlib.import_module(_name)
        except Exception:  # noqa: BLE001 - a module that cannot load ahead loads later
            pass

# When the imports above were done (wall clock): a child forked before then
# waited for them (the judge's account of a worker's start, session.py).
READY_AT = time.time()

if torch.cuda.is_initialized():  # pragma: no cover - a torch change would be caught here
    raise RuntimeError("preloading initialised CUDA; children of the forkserver could not use it")
