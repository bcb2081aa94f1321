# KernelBench level1/40_LayerNorm, sample 0: LayerNorm over the trailing normalized_shape, split so that
# long rows still fill the GPU: kernel 1 gives each CHUNK of a row its count-weighted mean and sum of
# squared deviations; kernel 2 merges a row's chunk statistics (Chan's formula) and normalizes one chunk.
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, N, n_chunks, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0)
    cnt = tl.minimum(N - c * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / cnt
    dx = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + row * n_chunks + c, mean)
    tl.store(m2_ptr + row * n_chunks + c, tl.sum(dx * dx, axis=0))


@triton.jit
def normalize_kernel(x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, m2_ptr, N, n_chunks, eps,
                     CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    acc = tl.zeros([BLOCK_C], tl.float32)
    for c0 in range(0, n_chunks, BLOCK_C):
        cs = c0 + tl.arange(0, BLOCK_C)
        cm = cs < n_chunks
        cnt = tl.where(cm, tl.minimum(N - cs * CHUNK, CHUNK), 0).to(tl.float32)
        acc += cnt * tl.load(mean_ptr + row * n_chunks + cs, mask=cm, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_C], tl.float32)
    for c0 in range(0, n_chunks, BLOCK_C):
        cs = c0 + tl.arange(0, BLOCK_C)
        cm = cs < n_chunks
        cnt = tl.where(cm, tl.minimum(N - cs * CHUNK, CHUNK), 0).to(tl.float32)
        mu = tl.load(mean_ptr + row * n_chunks + cs, mask=cm, other=0.0)
        m2 = tl.load(m2_ptr + row * n_chunks + cs, mask=cm, other=0.0)
        acc += m2 + cnt * (mu - mean) * (mu - mean)
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + row * N + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        N = math.prod(self.normalized_shape)
        rows = x.numel() // N
        CHUNK = min(4096, triton.next_power_of_2(N))
        n_chunks = triton.cdiv(N, CHUNK)
        mean = torch.empty((rows, n_chunks), device=x.device, dtype=torch.float32)
        m2 = torch.empty_like(mean)
        grid = (rows, n_chunks)
        chunk_stats_kernel[grid](x, mean, m2, N, n_chunks, CHUNK=CHUNK, num_warps=8)
        BLOCK_C = min(1024, triton.next_power_of_2(n_chunks))
        normalize_kernel[grid](x, self.weight.contiguous(), self.bias.contiguous(), out, mean, m2, N, n_chunks,
                               self.eps, CHUNK=CHUNK, BLOCK_C=BLOCK_C, num_warps=8)
        return out
