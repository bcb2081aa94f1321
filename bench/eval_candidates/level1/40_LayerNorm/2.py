# KernelBench level1/40_LayerNorm, sample 2: honest but different: one program per normalized row
# with three passes (mean, variance of x - mean, write). Simple and exact, but only `rows` programs,
# so it underfills the GPU when rows are few and long.
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_row_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * N
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        d = tl.where(mask, tl.load(x_ptr + base + cols, mask=mask, other=0.0) - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        tl.store(out_ptr + base + cols, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        N = math.prod(self.normalized_shape)
        rows = x.numel() // N
        BLOCK = min(4096, triton.next_power_of_2(N))
        layernorm_row_kernel[(rows,)](x, self.weight.contiguous(), self.bias.contiguous(), out, N, self.eps,
                                      BLOCK=BLOCK, num_warps=8)
        return out
