"""KernelEvo: turn slow PyTorch code into fast, verified GPU kernels."""

__version__ = "0.1.0"
