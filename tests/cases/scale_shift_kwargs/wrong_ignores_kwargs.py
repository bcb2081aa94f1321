# expect: wrong_output
# why: accepts the keyword arguments but ignores them (scale 1, shift 0).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, **kwargs):
        super().__init__()
        self.dim = dim
        self.scale = 1.0
        self.shift = 0.0

    def forward(self, x):
        out = torch.empty_like(x)
        scale_shift_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), self.scale, self.shift, BLOCK=1024)
        return out
