// Row argmax; see argmax.cuh. One block, or one cluster of blocks, per row: each thread scans a
// strided share of its block's slice with 16-byte loads keeping (largest value, its first index),
// then a warp and a block reduction that prefers the larger value and, on equal values, the lower
// index; block 0 of the cluster takes the blocks' results by distributed shared memory in rank
// order (the order does not change the result: the preference is a total order).
#include <cooperative_groups.h>

#include <climits>

#include "engine/cuda/argmax.cuh"
#include "engine/cuda/launch.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kThreads = 512;

struct Best {
  float v;
  int32_t i;  // INT32_MAX: nothing seen (only NaNs)
};

__device__ __forceinline__ Best better(Best a, Best b) {
  // NaN values never win: neither comparison holds for them.
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}

__device__ __forceinline__ void see(Best& b, float v, int32_t i) {
  if (v > b.v || (v == b.v && i < b.i)) b = Best{v, i};
}

template <int kBlocks>
__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t vocab, int32_t* ids) {
  wait_for_predecessor();
  const int64_t row_index = blockIdx.x / kBlocks;
  const int rank = static_cast<int>(blockIdx.x % kBlocks);
  const float* row = logits + row_index * vocab;
  // Index 0's logit for the NaN rule at the end, read now so that it is not a round trip there.
  const float first = rank == 0 && threadIdx.x == 0 ? row[0] : 0.0f;
  Best b{-INFINITY, INT32_MAX};  // a row of -inf takes its first index (equal, lower index)
  // This block's slice of the row's items: 16-byte chunks of 4 logits, or single logits.
  const bool by4 = vocab % 4 == 0;
  const int64_t items = by4 ? vocab / 4 : vocab;
  const auto begin = static_cast<int32_t>(items * rank / kBlocks);
  const auto end = static_cast<int32_t>(items * (rank + 1) / kBlocks);
  if (by4) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
#pragma unroll 4
    for (int32_t c = begin + static_cast<int32_t>(threadIdx.x); c < end; c += kThreads) {
      const float4 v = row4[c];
      see(b, v.x, 4 * c);
      see(b, v.y, 4 * c + 1);
      see(b, v.z, 4 * c + 2);
      see(b, v.w, 4 * c + 3);
    }
  } else {
    for (int32_t c = begin + static_cast<int32_t>(threadIdx.x); c < end; c += kThreads) see(b, row[c], c);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  __shared__ Best warp_best[kThreads / 32];
  __shared__ Best block_best;
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best r = warp_best[0];
    for (int w = 1; w < kThreads / 32; ++w) r = better(r, warp_best[w]);
    block_best = r;
  }
  if constexpr (kBlocks > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's result is in its shared memory
    if (rank == 0 && threadIdx.x < 32) {
      // Lane k reads block k's result (all at once), then the warp reduces them.
      const int k = static_cast<int>(threadIdx.x);
      Best r = k < kBlocks ? *cluster.map_shared_rank(&block_best, k) : Best{-INFINITY, INT32_MAX};
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        r = better(r, Best{__shfl_xor_sync(0xffffffffu, r.v, o), __shfl_xor_sync(0xffffffffu, r.i, o)});
      }
      if (k == 0) block_best = r;
    }
    cluster.sync();  // block 0 has read the others' shared memory: they may exit
#elif defined(__CUDA_ARCH__)
    __trap();  // clusters need compute capability 9.0 (argmax_rows' callers pass 1 below it)
#endif
  } else {
    __syncthreads();
  }
  if (rank == 0 && threadIdx.x == 0) {
    // A NaN at index 0 wins (the host's one-pass loop never replaces it); only NaNs: 0.
    ids[row_index] = (isnan(first) || block_best.i == INT32_MAX) ? 0 : block_best.i;
  }
}

}  // namespace

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, int blocks_per_row,
                 cudaStream_t stream) {
  if (rows == 0) return;
  dispatch_row_cluster(blocks_per_row, [&](auto b) {
    constexpr int B = decltype(b)::value;
    launch_row_clusters<argmax_kernel<B>>(rows, B, kThreads, stream, 0, logits, vocab, ids);
  });
}

}  // namespace kernelllm::cuda
