# expect: correct
# near_miss: globals_rebinding
# why: near-miss of globals_rebinding: imports torch._dynamo at module level, as torch.compile does; that import rebinds torch.manual_seed to dynamo's wrapper of the original, which the worker has done before its snapshot of these functions (torch's doing, not the candidate's), and the kernel is an honest relu.
import torch
import torch._dynamo  # noqa: F401  (what torch.compile imports)
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
