# KL divergence between two distributions (KernelBench level1/98 shape, tiny): get_inputs()
# itself computes with torch (softmax of random rows), as many KernelBench problems do.
import torch
import torch.nn as nn

batch_size = 16
dim = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.nn.functional.kl_div(torch.log(predictions), targets, reduction="batchmean")


def get_inputs():
    return [torch.randn(batch_size, dim).softmax(dim=-1), torch.randn(batch_size, dim).softmax(dim=-1)]


def get_init_inputs():
    return []
