# expect: correct
# multishape: fail
# why: brittle: grid and mask hard-code 4096 elements (16x256); smaller inputs make it read and write out of bounds, larger ones leave the tail unwritten.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        out = torch.zeros_like(a)
        add_kernel[(4,)](a, b, out, 4096, BLOCK=1024)
        return out
