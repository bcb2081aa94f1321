# expect: correct
# near_miss: stale_memory
# why: near-miss of stale_memory: output from torch.empty (never initialised) but every element is written, including a masked tail (BLOCK does not divide numel).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def launch_relu(x, out):
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


@triton.jit
def relu_small_blocks(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n = x.numel()
        head = n - 5
        relu_small_blocks[(triton.cdiv(head, 512),)](x, out, head, BLOCK=512)
        relu_small_blocks[(1,)](x.reshape(-1)[head:], out.reshape(-1)[head:], n - head, BLOCK=8)
        return out
