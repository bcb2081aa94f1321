# expect: correct
# near_miss: no_triton_kernel
# why: Triton computes every per-row loss from int64 targets; torch only takes the final mean (a small epilogue, not the work).
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        assert targets.dtype == torch.int64, f'targets must stay int64, got {targets.dtype}'
        rows, classes = predictions.shape
        losses = torch.empty(rows, dtype=predictions.dtype, device=predictions.device)
        row_loss_kernel[(triton.cdiv(rows, 128),)](predictions, targets, losses, rows, C=classes, BR=128,
                                                  BC=triton.next_power_of_2(classes))
        return losses.mean()
