"""Imported by the forkserver in bench/warm_start.py: more modules, and optionally a first compile.

KERNELEVO_BENCH_PRELOAD names the modules (comma-separated); KERNELEVO_BENCH_WARM
is "" (imports only), "eager" (a dynamo trace of a tiny function with the
eager backend) or "inductor" (a tiny inductor compile on CPU tensors). None of
it may initialise CUDA: a forkserver child could not use the GPU then.
"""

import importlib
import os

import torch

for _name in filter(None, os.environ.get("KERNELEVO_BENCH_PRELOAD", "").split(",")):
    try:
        importlib.import_module(_name)
    except Exception:  # noqa: BLE001 - a module that cannot be imported ahead is left
        pass
    if torch.cuda.is_initialized():
        raise RuntimeError(f"importing {_name} initialised CUDA")

_WARM = os.environ.get("KERNELEVO_BENCH_WARM", "")
if _WARM:
    _compiled = torch.compile(lambda x: torch.softmax(x * 2 + 1, dim=-1),
                              backend="eager" if _WARM == "eager" else "inductor")
    _compiled(torch.ones(4, 8))
    if torch.cuda.is_initialized():
        raise RuntimeError(f"a {_WARM} compile initialised CUDA")
