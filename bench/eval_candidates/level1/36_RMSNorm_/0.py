# KernelBench level1/36_RMSNorm_, sample 0: RMS over the feature axis (dim 1) of a (batch, features, *)
# tensor. Each program owns BLOCK_S spatial positions of one batch item and walks the features twice
# (sum of squares, then x / sqrt(mean + eps)); loads are contiguous along the spatial axis.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, out_ptr, F, S, eps, BLOCK_F: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    smask = s < S
    base = b * F * S
    acc = tl.zeros([BLOCK_F, BLOCK_S], tl.float32)
    for f0 in range(0, F, BLOCK_F):
        f = (f0 + tl.arange(0, BLOCK_F)).to(tl.int64)
        mask = (f < F)[:, None] & smask[None, :]
        v = tl.load(x_ptr + base + f[:, None] * S + s[None, :], mask=mask, other=0.0)
        acc += v * v
    rms = tl.sqrt(tl.sum(acc, axis=0) / F + eps)
    for f0 in range(0, F, BLOCK_F):
        f = (f0 + tl.arange(0, BLOCK_F)).to(tl.int64)
        mask = (f < F)[:, None] & smask[None, :]
        offs = base + f[:, None] * S + s[None, :]
        v = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, v / rms[None, :], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        B, F = x.shape[0], x.shape[1]
        S = x.numel() // max(B * F, 1)
        BLOCK_F = min(16, triton.next_power_of_2(F))
        BLOCK_S = min(256, triton.next_power_of_2(S))
        grid = (B, triton.cdiv(S, BLOCK_S))
        rmsnorm_kernel[grid](x, out, F, S, self.eps, BLOCK_F=BLOCK_F, BLOCK_S=BLOCK_S, num_warps=8)
        return out
