// What the decode kernels that split a token's positions share (nvcc only): the split kernel of
// attention.cu and the own-position kernel of attention_suffix.cu give one block a split of one
// token's positions and write its (max, sum, output) into that split's slots.
#pragma once

#include <cfloat>
#include <cstdint>

#include "engine/cuda/attention.cuh"

namespace kernelllm::cuda {

// Block (t, g, split)'s positions [begin, end) of token t (n_ctx of them in all, from ctx_begin[t]
// or 0 on), in gridDim.z splits of at least min_split_positions each (the last splits may be empty).
struct SplitRange {
  int n_ctx, begin, end;
};
__device__ __forceinline__ SplitRange split_range(const AttentionArgs& a, int t, int split) {
  const int n_ctx = a.pos[t] + 1;
  const int first = a.ctx_begin != nullptr ? a.ctx_begin[t] : 0;
  const int even = (n_ctx - first + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z);
  const int chunk = even > static_cast<int>(a.min_split_positions) ? even : static_cast<int>(a.min_split_positions);
  const int begin = first + split * chunk;
  return {n_ctx, begin, begin + chunk < n_ctx ? begin + chunk : n_ctx};
}

// Split slot `slot0` of the group's first head (the others a.splits apart) with no positions:
// empty statistics, which the merge skips. Threads 0..group-1 write one head each.
__device__ __forceinline__ void write_empty_split(const AttentionArgs& a, int64_t slot0, int group) {
  if (static_cast<int>(threadIdx.x) < group) {
    a.partial_ml[(slot0 + static_cast<int64_t>(threadIdx.x) * a.splits) * 2] = -FLT_MAX;
    a.partial_ml[(slot0 + static_cast<int64_t>(threadIdx.x) * a.splits) * 2 + 1] = 0.0f;
  }
}

}  // namespace kernelllm::cuda
