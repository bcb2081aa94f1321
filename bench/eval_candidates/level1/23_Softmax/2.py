# KernelBench level1/23_Softmax, sample 2: honest but different: three passes over each row
# (max, then sum of exp(x - max), then write), one more read of the row than sample 0.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax3_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=-float("inf"))
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=-float("inf"))
        s += tl.exp(x - row_max)
    inv = 1.0 / tl.sum(s, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=mask, other=-float("inf"))
        tl.store(out_ptr + base + cols, tl.exp(x - row_max) * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.movedim(1, -1).contiguous()
        out = torch.empty_like(x2)
        n_cols = x2.shape[-1]
        rows = x2.numel() // n_cols
        BLOCK = min(2048, triton.next_power_of_2(n_cols))
        softmax3_kernel[(rows,)](x2, out, n_cols, BLOCK=BLOCK, num_warps=4)
        return out.movedim(-1, 1)
