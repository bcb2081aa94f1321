# KernelBench level1/19_ReLU, sample 2: honest but different: one program per row walking the row
# in BLOCK-wide steps (fewer, longer programs than sample 0; slower on wide rows, still any shape).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_rows_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        tl.store(out_ptr + base + cols, tl.where(x > 0, x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1] if x.dim() > 0 else 1
        rows = x.numel() // max(n_cols, 1)
        relu_rows_kernel[(rows,)](x, out, n_cols, BLOCK=1024, num_warps=4)
        return out
