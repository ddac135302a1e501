"""Bad: the reference renamed. Imports Triton for show, defines no kernel, calls torch.relu."""
import torch
import torch.nn as nn
import triton  # noqa: F401  (imported, never used)
import triton.language as tl  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
