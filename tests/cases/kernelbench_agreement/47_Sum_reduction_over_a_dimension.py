# expect: correct
# kernelbench: level1/47_Sum_reduction_over_a_dimension.py
# why: honest fp32 sum over the middle of three dims (keepdim): one program per (batch, column block), loop over the reduced dim, coalesced column loads.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_middle_kernel(x_ptr, out_ptr, reduced, cols, BLOCK_C: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < cols
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for r in range(0, reduced):
        acc += tl.load(x_ptr + (b * reduced + r) * cols + c, mask=mask, other=0.0)
    tl.store(out_ptr + b * cols + c, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer = 1
        for s in x.shape[:dim]:
            outer *= s
        inner = x.numel() // (outer * x.shape[dim])
        out_shape = list(x.shape)
        out_shape[dim] = 1
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        grid = (outer, triton.cdiv(inner, 128))
        sum_middle_kernel[grid](x, out, x.shape[dim], inner, BLOCK_C=128)
        return out
