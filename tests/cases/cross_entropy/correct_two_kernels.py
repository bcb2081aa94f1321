# expect: correct
# near_miss: closed_form
# why: near-miss of closed_form: per-row losses, then a second single-block kernel averages them; everything depends on the data.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_loss_kernel(logits_ptr, targets_ptr, loss_ptr, rows, C: tl.constexpr, BR: tl.constexpr,
                    BC: tl.constexpr):
    # loss[r] = logsumexp(logits[r, :]) - logits[r, targets[r]]; targets are int64 indices
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.arange(0, BC)
    rmask = r < rows
    mask = rmask[:, None] & (c[None, :] < C)
    z = tl.load(logits_ptr + r[:, None] * C + c[None, :], mask=mask, other=-float("inf"))
    t = tl.load(targets_ptr + r, mask=rmask, other=0)
    m = tl.max(z, axis=1)
    lse = m + tl.log(tl.sum(tl.exp(z - m[:, None]), axis=1))
    picked = tl.sum(tl.where(c[None, :] == t[:, None], z, 0.0), axis=1)
    tl.store(loss_ptr + r, lse - picked, mask=rmask)


@triton.jit
def mean_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    vals = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(vals, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        rows, classes = predictions.shape
        losses = torch.empty(rows, dtype=predictions.dtype, device=predictions.device)
        row_loss_kernel[(triton.cdiv(rows, 128),)](predictions, targets, losses, rows, C=classes, BR=128,
                                                  BC=triton.next_power_of_2(classes))
        out = torch.empty((), dtype=predictions.dtype, device=predictions.device)
        mean_kernel[(1,)](losses, out, rows, BLOCK=triton.next_power_of_2(rows))
        return out
