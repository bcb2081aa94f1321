# Uses the KernelBook init convention: get_init_inputs() returns [args, kwargs].
# Read as positional args instead, Model([256], {...}) fails in forward, so a verifier that
# picks the wrong convention cannot pass this problem.
import torch
import torch.nn as nn

batch_size = 16
dim = 256


class Model(nn.Module):
    def __init__(self, dim: int, scale: float = 1.0, shift: float = 0.0):
        super().__init__()
        self.dim = dim
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-1] == self.dim
        return x * self.scale + self.shift


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [[dim], {"scale": 0.5, "shift": 0.25}]
