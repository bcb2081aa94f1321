// RMSNorm kernels; see rmsnorm.cuh. One block per row; the sum of squares is a block reduction.
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/rmsnorm.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

template <class T, bool kAdd>
__global__ void rmsnorm_kernel(float* x, const float* delta, const float* weight, int64_t n, float eps,
                               const int32_t* rows_index, T* out) {
  grid_dependency_wait();
  allow_dependent_launch();
  const int64_t r = blockIdx.x;
  const int64_t src = rows_index != nullptr ? rows_index[r] : r;
  float* xr = x + src * n;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    float v = xr[i];
    if constexpr (kAdd) {
      v += delta[r * n + i];
      xr[i] = v;
    }
    sum_sq += v * v;
  }
  const float inv = 1.0f / sqrtf(block_sum(sum_sq) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) out[r * n + i] = from_f32<T>(weight[i] * (xr[i] * inv));
}

}  // namespace

void rmsnorm(DType type, const float* x, const float* weight, int64_t rows, int64_t n, float eps,
             const int32_t* rows_index, void* out, cudaStream_t stream) {
  if (rows == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_kernel(rmsnorm_kernel<T, false>, static_cast<unsigned>(rows), kThreads, 0, stream, const_cast<float*>(x),
                  static_cast<const float*>(nullptr), weight, n, eps, rows_index, static_cast<T*>(out));
  });
}

void add_rmsnorm(DType type, float* x, const float* delta, const float* weight, int64_t rows, int64_t n, float eps,
                 void* out, cudaStream_t stream) {
  if (rows == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_kernel(rmsnorm_kernel<T, true>, static_cast<unsigned>(rows), kThreads, 0, stream, x, delta, weight, n, eps,
                  static_cast<const int32_t*>(nullptr), static_cast<T*>(out));
  });
}

}  // namespace kernelllm::cuda
