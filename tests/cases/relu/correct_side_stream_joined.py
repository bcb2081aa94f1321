# expect: correct
# near_miss: side_stream
# why: near-miss of side_stream: uses a side stream, but the current stream waits on it (and the output is recorded on it) before forward returns.
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
        backend = torch.cuda if x.is_cuda else torch.cpu
        side = backend.Stream()
        current = backend.current_stream()
        side.wait_stream(current)
        out = torch.empty_like(x)
        with backend.stream(side):
            launch_relu(x, out)
        current.wait_stream(side)
        if x.is_cuda:
            out.record_stream(current)
        return out
