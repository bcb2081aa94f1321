// The MLP's activation (band_gemm_swiglu's output: y[n, inter] = silu(x . Wg^T) * (x . Wu^T) for
// W = [Wg; Wu]) with the work handed out while the kernel runs, for 1..kBandMaxTokens tokens.
//
// band_gemm_swiglu gives every SM one equal band of rows; on the H100 some SMs get their bytes
// ~10% slower than others, so the bands end 63-84 us apart and the kernel waits for the slowest
// (bench/cuda_ops/NOTES.md items 30 and 39). Here the work is units of `pairs` 16-row gate tiles
// with their up tiles over one of `chunks` column ranges; each block of a one-per-SM grid starts
// on unit blockIdx.x (its first weights go out before the wait for the previous kernel, as the
// band GEMM's do) and takes the next unit from a counter whenever its ring has room, so fast SMs
// take more units. With chunks > 1 a unit's sums go to `partials`, and the block that completes a
// pair group's last chunk adds the chunks' sums in chunk order and writes the activation: results
// never depend on timing (bit-identical run to run), only on pairs and chunks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// pairs: 1, 2 or 4 gate tiles per unit; chunks: 1..8 column ranges (fewer where the columns have
// fewer stages); segments: a stage's columns in 64-column segments (1..8), each stage one TMA copy
// of the gate tiles, one of the up tiles and one of the tokens; blocks: the grid (0 = one per SM);
// ring_kb: the ring's shared memory (0 = what is left of 220 KB beside the warps' sums; else 32..220).
struct BandDynamicConfig {
  int pairs = 1;
  int chunks = 1;
  int segments = 4;
  int blocks = 0;
  int ring_kb = 0;
};

// Global memory the kernel needs: int32 counters (zero before the first call; every call leaves
// them zero) and fp32 partial sums (chunks > 1 only).
struct BandDynamicScratch {
  int32_t* counters = nullptr;
  float* partials = nullptr;
  int64_t counter_count = 0, partial_count = 0;
};

// The scratch sizes a call of this shape needs (elements).
int64_t band_dynamic_counters(const BandDynamicConfig& config, int64_t inter);
int64_t band_dynamic_partials(const BandDynamicConfig& config, int64_t inter);

// Checks as band_gemm_swiglu (but cols a multiple of 64), plus the config and the scratch's sizes;
// compute capability 9.0+.
Status band_gemm_swiglu_dynamic(const BandDynamicConfig& config, DType type, const void* w, int64_t inter,
                                int64_t cols, const void* x, int64_t n_tokens, void* y,
                                const BandDynamicScratch& scratch, int sms, cudaStream_t stream);

}  // namespace kernelllm::cuda
