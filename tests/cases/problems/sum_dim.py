# Sum over dim 1 with keepdim (KernelBench level1 "sum reduction over a dimension" shape rule).
import torch
import torch.nn as nn

batch_size = 16
dim1 = 64
dim2 = 16
reduce_dim = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
