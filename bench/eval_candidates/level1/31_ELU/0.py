# KernelBench level1/31_ELU, sample 0: ELU with the module's alpha.
# One program per BLOCK of the flattened tensor; int64 offsets, masked tail, any shape.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def elu_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.where(x > 0, x, alpha * (tl.exp(x) - 1.0))
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 4096
        elu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, self.alpha, BLOCK=BLOCK, num_warps=8)
        return out
