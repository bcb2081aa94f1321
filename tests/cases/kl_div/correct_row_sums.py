# expect: correct
# near_miss: torch_fallback
# why: near-miss of torch_fallback: the problem's get_inputs() computes with torch (softmax), in the candidate's process as in the judge's, inside the run's accounted span; that work is the judge's baseline, not the candidate's. One Triton program per row sums t * (log t - log p); torch adds the 16 row sums (glue).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def kl_row_kernel(p_ptr, t_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        mask = cols < n_cols
        p = tl.load(p_ptr + row * n_cols + cols, mask=mask, other=1.0)
        t = tl.load(t_ptr + row * n_cols + cols, mask=mask, other=1.0)
        acc += tl.where(mask, t * (tl.log(t) - tl.log(p)), 0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        rows, cols = p.shape
        partial = torch.empty(rows, device=p.device, dtype=torch.float32)
        kl_row_kernel[(rows,)](p, t, partial, cols, BLOCK=256)
        return partial.sum() / rows
