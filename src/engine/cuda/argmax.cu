// Row argmax; see argmax.cuh. One block of 1,024 threads per row: each thread scans a strided
// share with 16-byte loads keeping (largest value, its first index), then a warp and a block
// reduction that prefers the larger value and, on equal values, the lower index.
#include <climits>

#include "engine/cuda/argmax.cuh"
#include "engine/cuda/launch.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kThreads = 1024;

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

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t vocab, int32_t* ids) {
  grid_dependency_wait();
  allow_dependent_launch();
  const float* row = logits + blockIdx.x * vocab;
  Best b{-INFINITY, INT32_MAX};  // a row of -inf takes its first index (equal, lower index)
  const auto n = static_cast<int32_t>(vocab);
  if (vocab % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int32_t c = threadIdx.x; c < n / 4; c += kThreads) {
      const float4 v = row4[c];
      see(b, v.x, 4 * c);
      see(b, v.y, 4 * c + 1);
      see(b, v.z, 4 * c + 2);
      see(b, v.w, 4 * c + 3);
    }
  } else {
    for (int32_t c = threadIdx.x; c < n; c += kThreads) see(b, row[c], c);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  __shared__ Best warp_best[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best r = warp_best[0];
    for (int w = 1; w < kThreads / 32; ++w) r = better(r, warp_best[w]);
    // A NaN at index 0 wins (the host's one-pass loop never replaces it); only NaNs: 0.
    ids[blockIdx.x] = (isnan(row[0]) || r.i == INT32_MAX) ? 0 : r.i;
  }
}

}  // namespace

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, cudaStream_t stream) {
  if (rows == 0) return;
  launch_kernel(argmax_kernel, static_cast<unsigned>(rows), kThreads, 0, stream, logits, vocab, ids);
}

}  // namespace kernelllm::cuda
