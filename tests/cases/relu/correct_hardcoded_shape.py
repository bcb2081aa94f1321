# expect: correct
# multishape: fail
# why: brittle: launches exactly 4 programs of 1024 with no mask (the problem's 16x256); right at the given size, wrong at any other.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_4096_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs), 0.0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.zeros(16, 256, dtype=x.dtype, device=x.device)
        relu_4096_kernel[(4,)](x, out, BLOCK=1024)
        return out
