# expect: correct
# why: honest fp32 tree reduction in Triton; its rounding differs from torch.sum's, within the reference's own error.
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
        assert dim == 1

    def forward(self, x):
        batch, dim1, dim2 = x.shape
        out = torch.empty((batch, 1, dim2), dtype=x.dtype, device=x.device)
        sum_dim1_kernel[(batch * dim2,)](x, out, dim1, dim2, BLOCK=triton.next_power_of_2(dim1))
        return out
