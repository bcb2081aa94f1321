# expect: wrong_output
# rule: inputs_differ
# why: replaces the input maker in its own process so that its inputs are zeros (relu(0) = 0) without forging the checksum it reports; the judge sees that the inputs it ran on are not the trial's and says so instead of a plain value mismatch.
import sys
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


def _zero_inputs():
    mod = next((m for name, m in sys.modules.items() if name.endswith("worker.inputs")), None)
    if mod is None:
        return
    real_make = mod.Recipe.make
    mod.Recipe.make = lambda self, seed, distribution="normal": [
        torch.zeros_like(a) if isinstance(a, torch.Tensor) else a for a in real_make(self, seed, distribution)]


_zero_inputs()


class ModelNew(nn.Module):
    def forward(self, x):
        return launch_relu(x, torch.empty_like(x))
