# expect: runtime_error
# why: asks for 2**60 bytes (beyond any address space, so it fails up front even with overcommit): torch raises an out-of-memory error, the process survives.
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        workspace = torch.empty(2**58, dtype=torch.float32, device=x.device)
        return launch_relu(x, workspace[: x.numel()].view(x.shape))
