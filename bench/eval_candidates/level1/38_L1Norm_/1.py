# KernelBench level1/38_L1Norm_, sample 1: DELIBERATELY FLAWED (see bench/eval_candidates/README.md):
# divides by the SUM of |x| over the row (a true L1 normalization) instead of the mean the reference uses.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l1norm_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.abs(tl.load(x_ptr + base + cols, mask=cols < n_cols, other=0.0))
    s = tl.sum(acc, axis=0)
    denom = s
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        v = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        tl.store(out_ptr + base + cols, v / denom, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, n_cols = x.shape
        BLOCK = min(4096, triton.next_power_of_2(n_cols))
        l1norm_kernel[(rows,)](x, out, n_cols, BLOCK=BLOCK, num_warps=8)
        return out
