# expect: compile_error
# why: the Triton kernel is invalid (tl.arange over a non-power-of-2 range); Triton rejects it at its first launch (CompilationError on GPU, InterpreterError on CPU).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_relu_kernel(x_ptr, out_ptr, n):
    offs = tl.arange(0, 1000)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        bad_relu_kernel[(triton.cdiv(x.numel(), 1000),)](x, out, x.numel())
        return out
