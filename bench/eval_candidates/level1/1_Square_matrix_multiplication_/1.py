# KernelBench level1/1_Square_matrix_multiplication_, sample 1: DELIBERATELY FLAWED (see
# bench/eval_candidates/README.md): B's two strides are passed in swapped order, so the kernel reads B
# transposed and computes A @ B^T (same shape for square inputs, wrong values).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None].to(tl.int64) * s_am + kk[None, :] * s_ak,
                    mask=(rm < M)[:, None] & (kk < K)[None, :], other=0.0)
        b = tl.load(b_ptr + kk[:, None].to(tl.int64) * s_bk + rn[None, :] * s_bn,
                    mask=(kk < K)[:, None] & (rn < N)[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * s_cm + rn[None, :] * s_cn
    tl.store(c_ptrs, acc, mask=(rm < M)[:, None] & (rn < N)[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
        matmul_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(1), B.stride(0), C.stride(0), C.stride(1),
                            BM=128, BN=128, BK=32, GROUP_M=8, num_warps=8, num_stages=3)
        return C
