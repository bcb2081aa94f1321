# Mean squared error over a batch (KernelBench level1/94 style, scaled down): a 0-d loss, so a
# wrong answer can be close in relative terms (e.g. the mean over half the batch is ~2% off).
import torch
import torch.nn as nn

batch_size = 256
dim = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
