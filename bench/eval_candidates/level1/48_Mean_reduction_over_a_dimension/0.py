# KernelBench level1/48_Mean_reduction_over_a_dimension, sample 0: mean over self.dim (dim dropped).
# The contiguous input is viewed as (outer, R, inner); each program owns BLOCK_I inner positions of one
# outer index and walks R in BLOCK_R-row tiles (loads contiguous along inner). Any shape, any dim.
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim_kernel(x_ptr, out_ptr, R, inner, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    imask = i < inner
    base = o * R * inner
    acc = tl.zeros([BLOCK_R, BLOCK_I], tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = (r0 + tl.arange(0, BLOCK_R)).to(tl.int64)
        mask = (r < R)[:, None] & imask[None, :]
        v = tl.load(x_ptr + base + r[:, None] * inner + i[None, :], mask=mask, other=0.0)
        acc += v
    tl.store(out_ptr + o * inner + i, tl.sum(acc, axis=0) / R, mask=imask)


def split_dims(shape, dim):
    """(outer, R, inner) for a reduction of a contiguous tensor of `shape` over `dim`."""
    outer = math.prod(shape[:dim])
    inner = math.prod(shape[dim + 1:])
    return outer, shape[dim], inner


def blocks(R, inner):
    block_i = min(128, triton.next_power_of_2(inner))
    block_r = min(triton.next_power_of_2(R), max(8, 4096 // block_i))
    return block_r, block_i


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        shape = list(x.shape)
        d = self.dim % x.dim()
        outer, R, inner = split_dims(shape, d)
        out = torch.empty(shape[:d] + shape[d + 1:], device=x.device, dtype=x.dtype)
        block_r, block_i = blocks(R, inner)
        grid = (outer, triton.cdiv(inner, block_i))
        mean_dim_kernel[grid](x, out, R, inner, BLOCK_R=block_r, BLOCK_I=block_i, num_warps=8)
        return out
