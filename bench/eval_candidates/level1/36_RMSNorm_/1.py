# KernelBench level1/36_RMSNorm_, sample 1: DELIBERATELY FLAWED (see bench/eval_candidates/README.md):
# normalizes over the LAST axis (rows of the innermost dimension, as LLM RMSNorms do) instead of the
# feature axis dim 1 that the reference reduces over.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_rows_kernel(x_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=0.0)
        acc += v * v
    rms = tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        v = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        tl.store(out_ptr + base + cols, v / rms, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        rows = x.numel() // n_cols
        BLOCK = min(1024, triton.next_power_of_2(n_cols))
        rmsnorm_rows_kernel[(rows,)](x, out, n_cols, self.eps, BLOCK=BLOCK, num_warps=4)
        return out
