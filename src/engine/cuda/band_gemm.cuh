// Projections for 17..32 tokens (decode of k forks) that give every SM one contiguous band of
// weight rows: y[n, rows] = x[n, cols] . W[rows, cols]^T, W and x in f16 or bf16, y fresh in fp32
// or in the weights' dtype, or accumulated into fp32 (y += x . W^T).
//
// The matrix's 16-row tiles go in contiguous runs to clusters of 1, 2 or 4 blocks (one block per
// SM); the blocks of a cluster split the columns and add their sums through distributed shared
// memory in rank order. Weight and token tiles reach shared memory by TMA (tma.cuh), the tensor
// cores take them from there with ldmatrix. No workspace: results do not depend on timing.
// Unlike the staged GEMM (staged_gemm.cuh), no band is shared between clusters, so nothing is
// handed over through global memory, and a block's weight copies are long runs of its own rows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/common.cuh"
#include "kernelllm/base/status.h"
#include "engine/cuda/shapes.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

inline constexpr int kBandMaxTiles = 16;  // 16-row tiles per block (8 warps x 2)
inline constexpr int kBandMaxParts = kMaxOutputParts;  // band_gemm_parts' outputs (common.cuh)
inline constexpr int kBandStageCols = 128;  // columns per stage of a block's ring

// Where share `part` of band_gemm_parts' n_parts shares of `cols` columns starts: at its stage
// part * stages / n_parts (at `cols` where it has none).
inline int64_t band_part_first_col(int64_t cols, int n_parts, int part) {
  const int64_t stages = (cols + kBandStageCols - 1) / kBandStageCols;
  const int64_t col = part * stages / n_parts * kBandStageCols;
  return col < cols ? col : cols;
}

// How the kernel covers a matrix. band_layout() fills every field from the request; a caller may
// set `cluster` (1, 2 or 4; 0 = chosen), `blocks` (the most blocks, 0 = one per SM, at least one
// cluster) and `ring_kb` (shared memory for the ring of stages, 32..220 KB; 0 = 220).
struct BandConfig {
  int cluster = 0;
  int blocks = 0;
  int ring_kb = 0;
};

struct BandLayout {
  int clusters = 0;        // clusters in the grid (blocks = clusters x cluster x parts)
  int cluster = 1;         // blocks per cluster, splitting the columns
  int parts = 1;           // band_gemm_parts: blocks per run (not a cluster), splitting the columns
  int tiles = 0;           // 16-row tiles per cluster (the last one's may run past the matrix)
  int tile_warps = 0;      // warps over the tiles, tiles_per_warp each
  int tiles_per_warp = 1;  // 1 or 2
  int k_warps = 1;         // warps splitting each stage's columns: 1, 2 or 4
  int stages = 0;          // the ring's stages of 128 columns
  size_t smem = 0;         // dynamic shared memory per block
};

// band_supported (shapes.h): f16/bf16 weights, cols a multiple of 8 (16-byte rows),
// 1..kBandMaxTokens tokens; W and x 16-byte aligned. Compute capability 9.0+ (TMA, clusters).

// The layout for a rows x cols matrix and n_tokens tokens on `sms` SMs; clusters of 2 or 4 only
// where that many fit on the device at once (the occupancy query), so the grid is one wave. With
// swiglu, for band_gemm_swiglu's W of `rows` rows (2 x inter): `tiles` counts gate and up tiles.
BandLayout band_layout(const BandConfig& config, DType type, int64_t rows, int64_t cols, int64_t n_tokens, int sms,
                       bool swiglu = false);

// y_type: f32 or `type`; accumulate (y += ...) with f32 only. Checks everything and says what is
// wrong; an internal error when the driver cannot make the TMA descriptors.
Status band_gemm(const BandConfig& config, DType type, const void* w, int64_t rows, int64_t cols, const void* x,
                 int64_t n_tokens, void* y, DType y_type, bool accumulate, int sms, cudaStream_t stream);

// Split-K without clusters or a reduction pass, for consumers that add the parts themselves
// (add_rmsnorm's delta parts, rope_write_kv's qkv parts): the columns' stages of 128 go in
// n_parts near-equal shares, and share s is written fresh as parts[s] ([n, rows] fp32, zeros
// where a share has no columns), so y = parts[0] + parts[1] + ... (added in that order by the
// consumers: nothing depends on timing). A run of tiles takes 16 x tiles rows whole, n_parts
// blocks side by side (band_parts_layout), so a small matrix still streams long runs of rows on
// every SM (k = 20 on the H100: 6.52-6.55 ms a step against 6.65-6.68 without). Checks as
// band_gemm; n_parts 1..kBandMaxParts, cluster 0 or 1.
Status band_gemm_parts(const BandConfig& config, DType type, const void* w, int64_t rows, int64_t cols, const void* x,
                       int64_t n_tokens, float* parts, int n_parts, int sms, cudaStream_t stream);
// Its layout for n_parts parts (clusters = runs; empty for a part count out of range; the same at
// either dtype and any width), and the part count it chooses for a shape (1..4: the fewest stage
// rows a block streams, each part counted as one more 16-row stage for the consumer's reads).
BandLayout band_parts_layout(const BandConfig& config, int64_t rows, int64_t n_tokens, int sms, int n_parts);
int band_parts_for(const BandConfig& config, int64_t rows, int64_t cols, int64_t n_tokens, int sms);

// The MLP's activation straight from its gate and up projections: y[n, inter] = silu(x . Wg^T) *
// (x . Wu^T) in the weights' dtype, for W = [Wg; Wu] of 2 x inter rows (the fused gate_up
// matrix). Each block's band is matching runs of gate and up rows, so the pair's sums meet in one
// thread and only the activation is written (swiglu.cuh's kernel and the gate_up round trip
// dropped). Checks as band_gemm; 2 x inter <= 2^30.
Status band_gemm_swiglu(const BandConfig& config, DType type, const void* w, int64_t inter, int64_t cols,
                        const void* x, int64_t n_tokens, void* y, int sms, cudaStream_t stream);

}  // namespace kernelllm::cuda
