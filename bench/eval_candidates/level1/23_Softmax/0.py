# KernelBench level1/23_Softmax, sample 0: row softmax in two passes: an online pass keeps a
# per-lane running max and rescaled sum, then a second pass writes exp(x - max) / sum. Any row length.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    d = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, x)
        live = m_new > -float("inf")
        d = tl.where(live, d * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m > -float("inf"), d * tl.exp(m - row_max), 0.0), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=mask, other=-float("inf"))
        tl.store(out_ptr + base + cols, tl.exp(x - row_max) / total, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.movedim(1, -1).contiguous()
        out = torch.empty_like(x2)
        n_cols = x2.shape[-1]
        rows = x2.numel() // n_cols
        BLOCK = min(4096, triton.next_power_of_2(n_cols))
        softmax_kernel[(rows,)](x2, out, n_cols, BLOCK=BLOCK, num_warps=8)
        return out.movedim(-1, 1)
