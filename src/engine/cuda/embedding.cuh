// Embedding lookup: rows of the [vocab, hidden] table (the weight dtype) into the fp32
// residual stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// out[t, :] = float(table[ids[t], :]) for t < n_tokens.
void embedding(DType type, const void* table, const int32_t* ids, int64_t n_tokens, int64_t hidden, float* out,
               cudaStream_t stream);

// ids[t] = drawn[from[t]] for t < n_tokens: a decode step's tokens from the step before's draws,
// on the device (the decode chain, CudaBackend).
void gather_ids(const int32_t* drawn, const int32_t* from, int64_t n_tokens, int32_t* ids, cudaStream_t stream);

}  // namespace kernelllm::cuda
