# expect: runtime_error
# device: cuda
# why: asks the GPU for 4 TB; torch raises OutOfMemoryError, a runtime error of the candidate, and
#      the GPU stays healthy for the next one.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty(1 << 40, dtype=torch.float32, device=x.device)
        out = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out + scratch[:0].sum()
