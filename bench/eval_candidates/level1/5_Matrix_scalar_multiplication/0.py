# KernelBench level1/5_Matrix_scalar_multiplication, sample 0: C = A * s.
# One program per BLOCK of the flattened matrix; the scalar is a kernel argument.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(a_ptr, out_ptr, n, s, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, a * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        A = A.contiguous()
        out = torch.empty_like(A)
        n = A.numel()
        BLOCK = 4096
        scale_kernel[(triton.cdiv(n, BLOCK),)](A, out, n, float(s), BLOCK=BLOCK, num_warps=8)
        return out
