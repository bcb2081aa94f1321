# expect: wrong_output
# why: clamps inputs to [-6, 6] first: identical on standard-normal inputs (|x| > 6 has probability 2e-9), wrong on heavy-tailed inputs (strict profile's other distribution).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_clamped_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=mask, other=-float('inf'))
    x = tl.minimum(tl.maximum(x, -6.0), 6.0)
    x = tl.where(mask, x, -float('inf'))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * cols + c, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x)
        softmax_clamped_kernel[(rows,)](x, out, cols, BLOCK=triton.next_power_of_2(cols))
        return out
