# KernelBench level1/20_LeakyReLU, sample 0: LeakyReLU with the module's negative slope.
# One program per BLOCK of the flattened tensor; int64 offsets, masked tail, any shape.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.where(x >= 0, x, x * slope)
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 4096
        leaky_relu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, self.negative_slope, BLOCK=BLOCK, num_warps=8)
        return out
