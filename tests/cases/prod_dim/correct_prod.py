# expect: correct
# near_miss: zeros_pass
# why: near-miss of zeros_pass: an honest product reduction whose outputs are ~1e-18; it must be told apart from the zeros candidate by relative error, not refused.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def multiply(a, b):
    return a * b


@triton.jit
def prod_rows_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=1.0)
    tl.store(out_ptr + row, tl.reduce(x, 0, multiply))


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        assert dim == 1

    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty(rows, dtype=x.dtype, device=x.device)
        prod_rows_kernel[(rows,)](x, out, cols, BLOCK=triton.next_power_of_2(cols))
        return out
