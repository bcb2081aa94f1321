# expect: wrong_output
# near_miss: timed_output_mismatch
# why: near-miss of timed_output_mismatch: an honest bug, not a timing cheat. Like a hand-rolled autotuner, it switches to another launch configuration after its eighth call, and that one drops the last block of 256 elements; the correctness trials run before the switch, the timed calls after it. Re-run untimed on the timing set that failed, it is wrong there too, so the verdict is wrong_output, as when the trials catch a bug.
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
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        out = torch.zeros_like(x)
        n = x.numel()
        # the "tuned" configuration after warm-up: its bound is off by a block
        limit = n if self.calls <= 8 else n - 256
        relu_kernel[(triton.cdiv(limit, 256),)](x, out, limit, BLOCK=256)
        return out
