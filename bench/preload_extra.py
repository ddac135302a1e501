"""Imported by the forkserver in bench/warm_start.py: the modules it names, none initialising CUDA."""

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
