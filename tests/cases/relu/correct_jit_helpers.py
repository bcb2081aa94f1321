# expect: correct
# why: near-miss of the static audit's compile_error: the kernel calls another @triton.jit helper, tl.math, tl.static_range, the min builtin on constexprs and tensor methods (.to): all things Triton compiles, so it must pass.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu(x):
    return tl.where(x > 0, x, tl.zeros_like(x))


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, HALF: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * BLOCK
    for h in tl.static_range(2):
        offs = base + h * HALF + tl.arange(0, HALF)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = _relu(x) + tl.math.abs(x) * 0.0
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        block = min(1024, triton.next_power_of_2(n))
        relu_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block, HALF=block // 2)
        return out
