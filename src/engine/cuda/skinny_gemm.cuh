// Projections for a few tokens on tensor cores (decode of several sequences): y[n, rows] =
// x[n, cols] . W[rows, cols]^T for 1 <= n <= kSkinnyMaxTokens, W and x in f16 or bf16, y fresh
// in fp32 or in the weights' dtype, or accumulated into fp32 (y += x . W^T). Weight-bandwidth
// bound like the GEMV: every weight is read once, straight into mma fragments (see skinny_gemm.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/base/status.h"
#include "engine/cuda/shapes.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// skinny_supported (shapes.h): f16/bf16 weights, cols a multiple of 8 (16-byte rows),
// 1..kSkinnyMaxTokens tokens; W and x 16-byte aligned.

// How a block covers the matrix: each warp computes `tiles_per_warp` tiles of 16 rows (1, 2 or
// 4) for all tokens, and the block's `k_warps` warps (1, 2, 4 or 8; tiles_per_warp * k_warps <=
// 16) split the columns between them and add their sums in shared memory.
struct SkinnyConfig {
  int tiles_per_warp = 1;
  int k_warps = 8;
  // Whether the warps take the 64-column chunks in turn (warp w: chunks w, w + k_warps, ...) or
  // each a contiguous span.
  bool dealt = true;
};

// The layout skinny_gemm() uses for `cols` columns (any row count).
SkinnyConfig skinny_config(int64_t cols);

// y_type: f32 or `type`; accumulate (y += ...) with f32 only. Asserts nothing: callers check
// skinny_supported (skinny_gemm_with_config checks everything and says what is wrong).
void skinny_gemm(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, void* y,
                 DType y_type, bool accumulate, cudaStream_t stream);

Status skinny_gemm_with_config(const SkinnyConfig& config, DType type, const void* w, int64_t rows, int64_t cols,
                               const void* x, int64_t n_tokens, void* y, DType y_type, bool accumulate,
                               cudaStream_t stream);

}  // namespace kernelllm::cuda
