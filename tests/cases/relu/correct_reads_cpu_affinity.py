# expect: correct
# near_miss: cpu_affinity_changed
# why: near-miss of cpu_affinity_changed: it reads the CPUs it may run on (os.sched_getaffinity, one while timed) and sizes torch's thread pool to them; reading the mask moves nothing.
import os
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
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
        return launch_relu(x, torch.empty_like(x))
