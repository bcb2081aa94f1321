// Small-batch projection for decode: y[n, rows] = x[n, cols] . W[rows, cols]^T with W and x in
// the backend dtype and y in fp32, for n <= kGemvMaxTokens. Weight-bandwidth bound: one warp
// per output row, 16-byte loads, eight loads in flight per lane, every weight read once for all n.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

inline constexpr int64_t kGemvMaxTokens = 8;

// cols must be a multiple of 8 (16 bytes of f16/bf16; 32 bytes of f32) and W, x 16-byte aligned.
bool gemv_supported(DType type, int64_t cols, int64_t n_tokens);
void gemv(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, float* y,
          cudaStream_t stream);

}  // namespace kernelllm::cuda
