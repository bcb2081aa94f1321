# expect: correct
# near_miss: precision_downgrade
# why: near-miss of precision_downgrade (a scalar output, where a small relative error must not read as rounding): per-row sums of squared differences in fp32, then one block sums the rows and divides by every element of the batch.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sq_kernel(p_ptr, t_ptr, out_ptr, D: tl.constexpr, BD: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BD)
    mask = c < D
    p = tl.load(p_ptr + row * D + c, mask=mask, other=0.0)
    t = tl.load(t_ptr + row * D + c, mask=mask, other=0.0)
    d = p - t
    tl.store(out_ptr + row, tl.sum(d * d, axis=0))


@triton.jit
def mean_kernel(x_ptr, out_ptr, n_rows, n_total, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    vals = tl.load(x_ptr + offs, mask=offs < n_rows, other=0.0)
    tl.store(out_ptr, tl.sum(vals, axis=0) / n_total)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        rows, d = predictions.shape
        partial = torch.empty(rows, dtype=predictions.dtype, device=predictions.device)
        row_sq_kernel[(rows,)](predictions, targets, partial, D=d, BD=triton.next_power_of_2(d))
        out = torch.empty((), dtype=predictions.dtype, device=predictions.device)
        mean_kernel[(1,)](partial, out, rows, rows * d, BLOCK=triton.next_power_of_2(rows))
        return out
