# KernelBench level1/24_LogSoftmax, sample 0: row log-softmax: an online pass (per-lane running max and
# rescaled sum of exponentials), then x - max - log(sum) written in a second pass. Any row length.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
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
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        tl.store(out_ptr + base + cols, x - row_max - tl.log(total), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.movedim(self.dim, -1).contiguous()
        out = torch.empty_like(x2)
        n_cols = x2.shape[-1]
        rows = x2.numel() // n_cols
        BLOCK = min(4096, triton.next_power_of_2(n_cols))
        log_softmax_kernel[(rows,)](x2, out, n_cols, BLOCK=BLOCK, num_warps=8)
        return out.movedim(-1, self.dim)
