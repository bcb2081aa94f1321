# KernelBench level1/88_MinGPTNewGelu, sample 0: tanh-form GELU of minGPT.
# One program per BLOCK of the flattened tensor; int64 offsets, masked tail, any shape.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tanh(v):
    # tanh from exp(-2|v|): no overflow for any |v|
    t = tl.exp(-2.0 * tl.abs(v))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(v < 0, -r, r)


@triton.jit
def new_gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 4096
        new_gelu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps=8)
        return out
