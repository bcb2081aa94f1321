# expect: correct
# kernelbench: level1/23_Softmax.py
# why: honest fp32 row softmax for any row length: one program per row, three passes over column chunks (max, sum of exp, write).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * cols
    offs = tl.arange(0, BLOCK)
    running_max = tl.full((BLOCK,), -float('inf'), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        x = tl.load(x_ptr + base + start + offs, mask=start + offs < cols, other=-float('inf'))
        running_max = tl.maximum(running_max, x)
    m = tl.max(running_max, axis=0)
    partial = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        x = tl.load(x_ptr + base + start + offs, mask=start + offs < cols, other=-float('inf'))
        partial += tl.exp(x - m)
    denom = tl.sum(partial, axis=0)
    for start in range(0, cols, BLOCK):
        mask = start + offs < cols
        x = tl.load(x_ptr + base + start + offs, mask=mask, other=-float('inf'))
        tl.store(out_ptr + base + start + offs, tl.exp(x - m) / denom, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        softmax_kernel[(rows,)](x, out, cols, BLOCK=min(4096, triton.next_power_of_2(cols)))
        return out
