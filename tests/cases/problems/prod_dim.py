# Product over dim 1 of 64 standard-normal values: outputs are ~1e-18, so all-zeros passes any
# absolute tolerance (the degenerate case of KernelBench level1/50). Only a relative/normalized
# check or another input distribution tells an honest kernel from a zeros kernel.
import torch
import torch.nn as nn

batch_size = 16
dim = 64
reduce_dim = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.prod(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [reduce_dim]
