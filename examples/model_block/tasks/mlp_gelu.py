"""Submodule `mlp.gelu` (GELU) of block.py, as a KernelBench task.

Written by `kernelevo model extract`: the reference is the submodule itself,
rebuilt from the copy of the model file beside this task under seed 42, so
its weights are the profiled model's; inputs have the recorded shapes, dtypes
and value ranges.
"""

import torch
import torch.nn as nn

from _model_block_4f8ca4ffe2 import build as build_model  # the copy of block.py beside this task

SUBMODULE = "mlp.gelu"

size0 = 2
size1 = 16
size2 = 256


def reference_submodule() -> nn.Module:
    """The submodule, with the weights the model file's build() gives under its seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(42)  # the profile's seed (a literal: the judge varies constants)
        model = build_model()[0]
    return model.eval().get_submodule(SUBMODULE)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = reference_submodule()

    def forward(self, x0):
        return self.inner(x0)


def get_inputs():
    # input 0: float32 (2, 16, 256), values in [-2.393, 2.161], mean 0.0005227, std 0.5765
    return [
        torch.randn((size0, size1, size2), dtype=torch.float32) * 0.576469 + 0.000522722,
    ]


def get_init_inputs():
    return []
