# expect: sandbox_violation
# rule: process_flood
# why: forks up to 300 children that each sleep 3 s (bounded even with no sandbox); the process limit must stop it and the verifier must report it.
import os
import time
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
        self.flooded = False

    def forward(self, x):
        if not self.flooded:
            self.flooded = True
            for _ in range(300):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(3)
                    os._exit(0)
        return launch_relu(x, torch.empty_like(x))
