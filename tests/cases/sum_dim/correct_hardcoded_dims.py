# expect: correct
# multishape: fail
# why: brittle: the sizes 16x64x16 are constants in the launch; other sizes get wrong strides and a wrong output shape.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim1_kernel(x_ptr, out_ptr, dim1, dim2, BLOCK: tl.constexpr):
    # one program per (batch, column): reduces x[b, :, j] (stride dim2) in a single block
    pid = tl.program_id(0)
    b = pid // dim2
    j = pid % dim2
    r = tl.arange(0, BLOCK)
    vals = tl.load(x_ptr + b * dim1 * dim2 + r * dim2 + j, mask=r < dim1, other=0.0)
    tl.store(out_ptr + pid, tl.sum(vals, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        out = torch.empty((16, 1, 16), dtype=x.dtype, device=x.device)
        sum_dim1_kernel[(256,)](x, out, 64, 16, BLOCK=64)
        return out
