# KernelBench level1/40_LayerNorm, sample 1: DELIBERATELY FLAWED (see bench/eval_candidates/README.md):
# takes the mean and variance over the LAST axis only (as if normalized_shape were (dim2,)) instead of
# over the whole normalized_shape (features, dim1, dim2); the affine weight/bias are applied correctly.
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_last_kernel(x_ptr, w_ptr, b_ptr, out_ptr, L, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * L
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, L, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + cols, mask=cols < L, other=0.0)
    mean = tl.sum(acc, axis=0) / L
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, L, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < L
        d = tl.where(mask, tl.load(x_ptr + base + cols, mask=mask, other=0.0) - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / L + eps)
    for start in range(0, L, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < L
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        p = (base + cols) % N
        w = tl.load(w_ptr + p, mask=mask, other=0.0)
        b = tl.load(b_ptr + p, mask=mask, other=0.0)
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
        L = x.shape[-1]
        rows = x.numel() // L
        N = math.prod(self.normalized_shape)
        BLOCK = min(1024, triton.next_power_of_2(L))
        layernorm_last_kernel[(rows,)](x, self.weight.contiguous(), self.bias.contiguous(), out, L, N, self.eps,
                                       BLOCK=BLOCK, num_warps=4)
        return out
