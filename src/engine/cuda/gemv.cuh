// Small-batch projection for decode: y[n, rows] = x[n, cols] . W[rows, cols]^T with W and x in
// the backend dtype and y in fp32, for n <= kGemvMaxTokens. Weight-bandwidth bound: each row's
// 16-byte chunks are split over the warps of a block, every thread issues all its weight loads
// for a batch of rows at once, and every weight is read once for all n (see gemv.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/base/status.h"
#include "engine/cuda/shapes.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// gemv_supported (shapes.h): cols a multiple of 8 (16 bytes of f16/bf16; 32 bytes of f32); W, x
// 16-byte aligned.
void gemv(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, float* y,
          cudaStream_t stream);

// The Llama MLP's projection and activation in one pass: act[n, inter] = silu(x . G^T) * (x . U^T)
// in `type`, where w [2 * inter, cols] is the fused gate_up matrix (G its first inter rows, U the
// rest). The sums are gemv()'s; the activation is computed as swiglu.cuh computes it.
void gemv_swiglu(DType type, const void* w, int64_t inter, int64_t cols, const void* x, int64_t n_tokens, void* act,
                 cudaStream_t stream);

// How gemv() lays a block of 256 threads over the matrix: `warps_per_row` warps (1, 2, 4 or 8)
// share each row's columns, so a block holds 8 / warps_per_row groups, and each group computes
// `rows_per_group` rows (1, 2 or 4) together, reading each x chunk once for all of them.
struct GemvConfig {
  int warps_per_row = 8;
  int rows_per_group = 4;
};

// The layout gemv() uses for this shape (depends on the element size, rows and cols).
GemvConfig gemv_config(DType type, int64_t rows, int64_t cols);

// gemv() with a given layout (tests cover every layout); invalid_argument when the layout or the
// shape is outside what gemv_supported / GemvConfig allow.
Status gemv_with_config(const GemvConfig& config, DType type, const void* w, int64_t rows, int64_t cols,
                        const void* x, int64_t n_tokens, float* y, cudaStream_t stream);

// The previous kernel (one warp per row, 8 rows per block, x re-read per row), kept so the ops
// bench and the tests can compare the two in one run; not used by the backend.
void gemv_warp_per_row(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens,
                       float* y, cudaStream_t stream);

}  // namespace kernelllm::cuda
