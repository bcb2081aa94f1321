# Linear layer whose parameters are created in __init__: ModelNew only matches when it is
# constructed right after the same torch.manual_seed and creates its parameters in the same order.
import torch
import torch.nn as nn

batch_size = 16
in_features = 64
out_features = 32


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
