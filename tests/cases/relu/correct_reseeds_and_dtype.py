# expect: correct
# near_miss: inputs_differ
# why: near-miss for the inputs each process makes itself: at import it seeds torch's generator with its own seed and sets the default dtype to fp64, and forward draws random numbers; the verifier makes every trial's inputs under the trial's seed with the dtype pinned, so its inputs are the judge's and its honest output passes.
import torch
import torch.nn as nn
import triton
import triton.language as tl

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)


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
    def forward(self, x):
        torch.rand(4)  # consumes the generator between trials
        return launch_relu(x, torch.empty_like(x))
