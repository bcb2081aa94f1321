# Cross-entropy with int64 class targets (KernelBench level1/95 style): the targets must
# reach the candidate as int64, not cast to float. Output is a 0-d tensor.
import torch
import torch.nn as nn

batch_size = 4096
num_classes = 10


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
