# expect: crash
# device: cuda
# why: stores 2**40 elements past the output: CUDA reports an illegal memory access, which poisons
#      the candidate's CUDA context; the process must be recycled and the GPU health-checked.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_store_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs + (1 << 40), x * 3.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        bad_store_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        torch.cuda.synchronize()
        return out
