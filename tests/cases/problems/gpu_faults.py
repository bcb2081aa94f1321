# Elementwise scale on a 64x1024 fp32 tensor: home of the GPU-only fault cases (illegal memory
# access, a kernel that never finishes, an out-of-memory request) beside honest neighbours, so one
# verify call shows that a fault in one candidate costs no other candidate its verdict.
import torch
import torch.nn as nn

rows = 64
cols = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3.0


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
