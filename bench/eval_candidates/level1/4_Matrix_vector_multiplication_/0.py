# KernelBench level1/4_Matrix_vector_multiplication_, sample 0: C = A @ B for A (M, K) and B (K, 1).
# One program per row of A streams the row and B in BLOCK-wide steps, accumulating per lane in fp32.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matvec_kernel(a_ptr, b_ptr, c_ptr, K, s_am, s_ak, s_bk, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for k0 in range(0, K, BLOCK):
        k = (k0 + tl.arange(0, BLOCK)).to(tl.int64)
        mask = k < K
        a = tl.load(a_ptr + row * s_am + k * s_ak, mask=mask, other=0.0)
        b = tl.load(b_ptr + k * s_bk, mask=mask, other=0.0)
        acc += a * b
    tl.store(c_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        C = torch.empty((M, 1), device=A.device, dtype=torch.float32)
        BLOCK = min(4096, triton.next_power_of_2(K))
        matvec_kernel[(M,)](A, B, C, K, A.stride(0), A.stride(1), B.stride(0), BLOCK=BLOCK, num_warps=8)
        return C
