# Row softmax over 100 columns (not a power of two): every kernel masks a 128-wide block, so a
# masking bug changes one element or one row while the rest stays right. 40 x 100 fp32.
import torch
import torch.nn as nn

batch_size = 40
dim = 100


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
