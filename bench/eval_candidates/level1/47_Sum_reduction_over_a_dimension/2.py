# KernelBench level1/47_Sum_reduction_over_a_dimension, sample 2: honest but different: one program per
# output element walks the reduced axis with stride `inner` (strided, uncoalesced loads): correct, slower.
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_strided_kernel(x_ptr, out_ptr, R, inner, BLOCK_R: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    o = pid // inner
    i = pid % inner
    acc = tl.zeros([BLOCK_R], tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = (r0 + tl.arange(0, BLOCK_R)).to(tl.int64)
        acc += tl.load(x_ptr + (o * R + r) * inner + i, mask=r < R, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        shape = list(x.shape)
        d = self.dim % x.dim()
        outer, R, inner = math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])
        out = torch.empty(shape[:d] + [1] + shape[d + 1:], device=x.device, dtype=x.dtype)
        BLOCK_R = min(1024, triton.next_power_of_2(R))
        sum_strided_kernel[(outer * inner,)](x, out, R, inner, BLOCK_R=BLOCK_R, num_warps=4)
        return out
