// Projections for 17..32 tokens (decode of k forks), made to stream the weights at the copy rate:
// y[n, rows] = x[n, cols] . W[rows, cols]^T, W and x in f16 or bf16, y fresh in fp32 or in the
// weights' dtype, or accumulated into fp32 (y += x . W^T). Weight tiles are copied into shared
// memory by TMA (several stages in flight) and the tensor cores take them from there with
// ldmatrix; a persistent grid (one block per SM) splits the matrix's (row band, column stage)
// units evenly between its blocks, and a band that two or more blocks share is added up by the
// last of them in block order (see staged_gemm.cu). Results do not depend on timing. It reaches
// the copy rate only on large matrices (staged_units_per_block below).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/base/status.h"
#include "engine/cuda/shapes.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// The kernel's scratch: `partials` holds staged_partial_floats(blocks) floats (any contents),
// `counters` staged_counter_count(rows) int32 for the largest row count used, all zero before
// the first call; every call leaves them zero. `blocks` is the grid (one per SM is the layout
// the kernel is made for: it takes 160 KB of shared memory). One scratch per stream.
struct StagedScratch {
  float* partials = nullptr;
  int32_t* counters = nullptr;
  int64_t blocks = 0;
};
int64_t staged_partial_floats(int64_t blocks);
int64_t staged_counter_count(int64_t rows);

// Columns per stage: 128 (four stages in flight) or 256 (two).
struct StagedConfig {
  int stage_cols = static_cast<int>(kStagedStageCols);
};

// staged_supported and staged_units_per_block: shapes.h. f16/bf16 weights, cols a multiple of 8
// (16-byte rows), 1..kStagedMaxTokens tokens; W and x 16-byte aligned. Compute capability 9.0+
// (TMA).

// y_type: f32 or `type`; accumulate (y += ...) with f32 only. Checks nothing: callers ask
// staged_supported (staged_gemm_with_config checks everything and says what is wrong). False
// (nothing launched) when the driver cannot make the weights' TMA descriptor.
bool staged_gemm(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, void* y,
                 DType y_type, bool accumulate, const StagedScratch& scratch, cudaStream_t stream);

Status staged_gemm_with_config(const StagedConfig& config, DType type, const void* w, int64_t rows, int64_t cols,
                               const void* x, int64_t n_tokens, void* y, DType y_type, bool accumulate,
                               const StagedScratch& scratch, cudaStream_t stream);

}  // namespace kernelllm::cuda
