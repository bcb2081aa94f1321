# expect: correct
# near_miss: globals_rebinding
# why: near-miss of globals_rebinding: like many generated files, repeats the problem's globals, Model, get_inputs and get_init_inputs at module level (with other values); the verifier must use the problem's, not these.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def launch_relu(x, out):
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out

batch_size = 3
dim = 7


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.zeros_like(x)


def get_inputs():
    return [torch.zeros(batch_size, dim)]


def get_init_inputs():
    return [123]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return launch_relu(x, torch.empty_like(x))
