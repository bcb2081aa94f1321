# expect: correct
# attempts: timing_implausible
# device: cuda
# why: computes ReLU honestly on the caller's stream but spins the GPU for ~5 ms per call on a side stream (torch, not Triton, so the side_stream rule does not see it), hiding that work from stream events; the orchestrator's clock spans each whole call up to the device-wide synchronize, so the spin is in its published time: correct, and about 5 ms slow, never a fake speedup.
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x):
        if self.side is None:
            self.side = torch.cuda.Stream(device=x.device)
        with torch.cuda.stream(self.side):
            torch.cuda._sleep(10_000_000)  # about 5 ms of GPU cycles the caller's events never wait for
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
