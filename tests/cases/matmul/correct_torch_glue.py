# expect: correct
# near_miss: torch_fallback, no_triton_kernel
# why: near-miss of torch_fallback: torch only allocates (zeros), transposes and copies (b.t().contiguous(), a copy kernel on a GPU, not compute); the fp32 GEMM itself is one Triton kernel (tl.dot with input_precision="ieee").
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_bt_kernel(a_ptr, bt_ptr, c_ptr, M, N, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):  # K is a constexpr: unrolled, so the interpreter runs it too
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        # bt is B transposed (N, K), contiguous: read B[k, n] = bt[n, k]
        b = tl.load(bt_ptr + rn[None, :] * K + rk[:, None], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        bt = b.t().contiguous()
        c = torch.zeros((M, N), dtype=a.dtype, device=a.device)
        grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
        matmul_bt_kernel[grid](a.contiguous(), bt, c, M, N, K=K, BM=32, BN=32, BK=32)
        return c.view(M, N)
