# expect: wrong_output
# attempts: zeros_pass
# why: computes the cumprod of the first 128 columns only and writes zeros after them, where on standard-normal inputs the true values are below 1e-20 (zeros pass the tolerance there, and the kernel is faster). The judge adds a trial whose inputs keep their signs with magnitudes near 1 (no underflow): the zeroed tail is then plainly wrong.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def head_cumprod_kernel(x_ptr, out_ptr, cols, HEAD: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, HEAD)
    x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=1.0)
    tl.store(out_ptr + row * cols + c, tl.cumprod(x, axis=0), mask=c < cols)
    for s in range(HEAD, cols, BLOCK):  # the tail: "below 1e-20", so zeros
        t = s + tl.arange(0, BLOCK)
        tl.store(out_ptr + row * cols + t, tl.zeros((BLOCK,), dtype=tl.float32), mask=t < cols)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        assert dim == 1

    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x)
        head_cumprod_kernel[(rows,)](x.contiguous(), out, cols, HEAD=128, BLOCK=128)
        return out
