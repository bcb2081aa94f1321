// What the decode kernels that split a token's positions share (nvcc only): the split kernel of
// attention.cu and the own-position kernel of attention_suffix.cu give one block a split of one
// token's positions and write its (max, sum, output) into that split's slots; enter_split is how
// such a block starts.
#pragma once

#include <cfloat>
#include <cstdint>

#include "engine/cuda/attention.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"

namespace kernelllm::cuda {

// Block (t, g, split) of such a kernel: positions [begin, end) of token t (n_ctx of them in all,
// from ctx_begin[t] or 0 on), in gridDim.z splits of at least min_split_positions each (the last
// splits may be empty); t's page-table row; slot0, the split slot of the group's first head (the
// others a.splits apart).
struct SplitBlock {
  int n_ctx, begin, end;
  const int32_t* table;
  int64_t slot0;
};

// The split slot of block (t, g, split)'s first head; the group's others are a.splits apart.
__device__ __forceinline__ int64_t split_slot0(const AttentionArgs& a, int t, int g, int split) {
  const int64_t group = a.heads / a.kv_heads;
  return (static_cast<int64_t>(t) * a.heads + static_cast<int64_t>(g) * group) * a.splits + split;
}

// Empty statistics in the group's slots from slot0 on (a split without positions; the merge
// skips them). Threads 0..group-1 write them.
__device__ __forceinline__ void write_empty_split(const AttentionArgs& a, int64_t slot0) {
  const auto h = static_cast<int64_t>(threadIdx.x);
  if (h < a.heads / a.kv_heads) {
    a.partial_ml[(slot0 + h * a.splits) * 2] = -FLT_MAX;
    a.partial_ml[(slot0 + h * a.splits) * 2 + 1] = 0.0f;
  }
}

// Enters block (t, g, split) of a split kernel of `threads` threads: the metadata (positions,
// page tables) is uploaded before the pass and the cache rows before the token's were written by
// earlier passes, so the block's K and V rows (head_dim elements of KV head g) are fetched into L2
// before the wait for the previous kernel (launch.cuh), which follows. A split with no positions
// gets empty statistics (the merge skips them); the caller returns when begin >= end.
template <class T>
__device__ __forceinline__ SplitBlock enter_split(const AttentionArgs& a, int t, int g, int split, int head_dim,
                                                  int threads) {
  SplitBlock b;
  b.n_ctx = a.pos[t] + 1;
  const int first = a.ctx_begin != nullptr ? a.ctx_begin[t] : 0;
  const int even = (b.n_ctx - first + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z);
  const int chunk = even > static_cast<int>(a.min_split_positions) ? even : static_cast<int>(a.min_split_positions);
  b.begin = first + split * chunk;
  b.end = b.begin + chunk < b.n_ctx ? b.begin + chunk : b.n_ctx;
  b.table = a.block_table + static_cast<int64_t>(a.seq[t]) * a.table_width;
  prefetch_kv_rows(static_cast<const T*>(a.kv.pool), b.table, b.begin, b.end, static_cast<int>(a.kv.page_tokens),
                   a.kv.layers, a.layer, a.kv.kv_dim, static_cast<int64_t>(g) * head_dim, head_dim,
                   static_cast<int>(threadIdx.x), threads);
  wait_for_predecessor();
  b.slot0 = split_slot0(a, t, g, split);
  if (b.begin >= b.end) write_empty_split(a, b.slot0);
  return b;
}

// A split block's last step (blocks of W warps): the warps' (max, sum, unnormalized output) for
// each head h of the group, in shared memory as ml[w][h] = {max, sum} and acc[w][h][d] (MG heads
// of WIDTH dims per warp), combined into the head's split slot slot0 + h * a.splits. Warps without
// positions (sum 0) are skipped. Log2: the maxima are in base-2 units (the slots, as the merge
// reads them, hold natural-log ones).
template <int W, int MG, int WIDTH, bool Log2>
__device__ __forceinline__ void store_split_slots(const AttentionArgs& a, int64_t slot0, int group, int hd,
                                                  const float (*ml)[MG][2], const float (*acc)[MG][WIDTH]) {
  constexpr float kLn2 = 0.6931471805599453f;
  for (int idx = static_cast<int>(threadIdx.x); idx < group * hd; idx += W * 32) {
    const int h = idx / hd, d = idx % hd;
    float mx = -FLT_MAX;
    for (int w = 0; w < W; ++w) {
      if (ml[w][h][1] > 0.0f) mx = fmaxf(mx, ml[w][h][0]);
    }
    float sum = 0.0f, out = 0.0f;
    for (int w = 0; w < W; ++w) {
      const float f = ml[w][h][1] > 0.0f ? (Log2 ? exp2f(ml[w][h][0] - mx) : __expf(ml[w][h][0] - mx)) : 0.0f;
      sum += ml[w][h][1] * f;
      out += acc[w][h][d] * f;
    }
    const int64_t slot = slot0 + static_cast<int64_t>(h) * a.splits;
    a.partial_acc[slot * hd + d] = out;
    if (d == 0) {
      a.partial_ml[slot * 2] = Log2 ? mx * kLn2 : mx;
      a.partial_ml[slot * 2 + 1] = sum;
    }
  }
}

}  // namespace kernelllm::cuda
