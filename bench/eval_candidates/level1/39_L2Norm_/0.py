# KernelBench level1/39_L2Norm_, sample 0: x / ||x||_2 along dim 1 of a 2-D tensor; one program per
# row: a pass summing squares, then a pass writing x / sqrt(sum).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2norm_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=0.0)
        acc += v * v
    norm = tl.sqrt(tl.sum(acc, axis=0))
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        v = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        tl.store(out_ptr + base + cols, v / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, n_cols = x.shape
        BLOCK = min(4096, triton.next_power_of_2(n_cols))
        l2norm_kernel[(rows,)](x, out, n_cols, BLOCK=BLOCK, num_warps=8)
        return out
