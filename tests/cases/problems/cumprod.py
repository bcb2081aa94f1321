# Cumulative product along dim 1 (KernelBench level1/90_cumprod, scaled from 128 x 4000 to 8 x 500).
# On standard-normal inputs |cumprod| falls by ~e^-0.64 per column: below 1e-20 after ~70 columns,
# and below the tolerance after a few dozen, so zeros pass at most elements while the first columns
# are large (the whole output is not degenerate, only most of it).
import torch
import torch.nn as nn

batch_size = 8
input_shape = (500,)
dim = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, *input_shape)]


def get_init_inputs():
    return [dim]
