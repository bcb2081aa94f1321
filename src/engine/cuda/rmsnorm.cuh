// RMSNorm (HF LlamaRMSNorm in fp32: x / sqrt(mean(x^2) + eps) * weight) over the fp32
// residual stream, writing the matmul input dtype; optionally adding a delta first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/common.cuh"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// out[r] = norm(x[rows_index ? rows_index[r] : r]) for r < rows; out has `type` elements.
void rmsnorm(DType type, const float* x, const float* weight, int64_t rows, int64_t n, float eps,
             const int32_t* rows_index, void* out, cudaStream_t stream);
// x[r] = float(table[ids[r]]) (embedding()'s lookup, the table in `type`), out[r] = norm(x[r]):
// one kernel where the register kernel holds a row, else embedding() then rmsnorm().
void embed_rmsnorm(DType type, const void* table, const int32_t* ids, int64_t rows, int64_t n, const float* weight,
                   float eps, float* x, void* out, cudaStream_t stream);
// x[r] += delta[r]; out[r] = norm(x[r]). With delta_parts > 1 the delta is that many [rows][n]
// arrays one after another (band_gemm_parts' outputs), added to each other in order first.
// delta_parts: 1..kMaxOutputParts (common.cuh).
void add_rmsnorm(DType type, float* x, const float* delta, const float* weight, int64_t rows, int64_t n, float eps,
                 void* out, cudaStream_t stream, int delta_parts = 1);

}  // namespace kernelllm::cuda
