# KernelBench level1/94_MSELoss, sample 0: mean((predictions - targets)^2) as a 0-d tensor, in two
# deterministic stages: per-BLOCK partial sums of squared differences, then one program sums the partials.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sq_diff_partial_kernel(p_ptr, t_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(p_ptr + offs, mask=mask, other=0.0) - tl.load(t_ptr + offs, mask=mask, other=0.0)
    tl.store(part_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def finish_mean_kernel(part_ptr, out_ptr, n_parts, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_parts, BLOCK):
        idx = start + tl.arange(0, BLOCK)
        acc += tl.load(part_ptr + idx, mask=idx < n_parts, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        p = predictions.contiguous()
        t = targets.contiguous()
        n = p.numel()
        BLOCK = 4096
        n_parts = triton.cdiv(n, BLOCK)
        parts = torch.empty(n_parts, device=p.device, dtype=torch.float32)
        sq_diff_partial_kernel[(n_parts,)](p, t, parts, n, BLOCK=BLOCK, num_warps=8)
        out = torch.empty((), device=p.device, dtype=torch.float32)
        finish_mean_kernel[(1,)](parts, out, n_parts, n, BLOCK=1024, num_warps=4)
        return out
