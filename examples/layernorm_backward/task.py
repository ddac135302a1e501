import torch
import torch.nn as nn

batch_size = 4096
dim = 4096
# Judge the backward too: gradients of x, weight and bias against autograd's.
backward = True


class Model(nn.Module):
    """LayerNorm over the last dimension with a learnable weight and bias, trained."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=dim)
        # Away from ones and zeros, so a kernel that drops the affine is caught.
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
