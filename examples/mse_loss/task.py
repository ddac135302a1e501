import torch
import torch.nn as nn

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """Mean squared error between predictions and targets, as a 0-d tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
