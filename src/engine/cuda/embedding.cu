// Embedding lookup; see embedding.cuh.
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/embedding.cuh"

namespace kernelllm::cuda {
namespace {
// Each thread loads 8 elements of the row before it stores any: loads and stores one at a time
// made every store wait for its load, a memory round trip per 256 elements (ncu: 8.7 us for one
// 4,096-wide row).
template <class T>
__global__ void embedding_kernel(const T* __restrict__ table, const int32_t* __restrict__ ids, int64_t hidden,
                                 float* __restrict__ out) {
  constexpr int kInFlight = 8;
  wait_for_predecessor();
  const int64_t t = blockIdx.x;
  const T* row = table + static_cast<int64_t>(ids[t]) * hidden;
  float* dst = out + t * hidden;
  for (int64_t i0 = threadIdx.x; i0 < hidden; i0 += kInFlight * blockDim.x) {
    float v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int64_t i = i0 + j * blockDim.x;
      v[j] = i < hidden ? to_f32(row[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int64_t i = i0 + j * blockDim.x;
      if (i < hidden) dst[i] = v[j];
    }
  }
}

__global__ void gather_ids_kernel(const int32_t* __restrict__ drawn, const int32_t* __restrict__ from, int64_t n,
                                  int32_t* __restrict__ ids) {
  wait_for_predecessor();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n) ids[t] = drawn[from[t]];
}
}  // namespace

void gather_ids(const int32_t* drawn, const int32_t* from, int64_t n_tokens, int32_t* ids, cudaStream_t stream) {
  if (n_tokens == 0) return;
  launch_kernel(gather_ids_kernel, static_cast<unsigned>((n_tokens + 255) / 256), 256, 0, stream, drawn, from,
                n_tokens, ids);
}

void embedding(DType type, const void* table, const int32_t* ids, int64_t n_tokens, int64_t hidden, float* out,
               cudaStream_t stream) {
  if (n_tokens == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_kernel(embedding_kernel<T>, static_cast<unsigned>(n_tokens), 256, 0, stream, static_cast<const T*>(table),
                  ids, hidden, out);
  });
}

}  // namespace kernelllm::cuda
